// tc programs that make a lab namespace's veth a port of 802.1Q VLAN VID
// (the development kernels have no 802.1Q devices, but they run BPF):
// `tag` (egress) tags every frame the namespace sends with VID; `untag`
// (ingress) takes the tag off frames tagged VID and drops every other
// frame, untagged, of another VLAN or with another TPID than 0x8100, so
// that traffic passes only if lbd tags what it sends with the port's VLAN.
//
// The tag travels in the skb's metadata, not in the frame: the kernel
// moves a received tag there before any tap sees it. lbd's af_packet port
// gets it from the packet socket's header, and DPDK's af_packet PMD puts
// it back into the frame (it would leave it out with the VLAN_STRIP
// offload, which lbd does not enable), where lbd reads it.
//
// Built by the end-to-end tests (common/lab.rs, `Lab::tag_vlans`):
//   clang -O2 -target bpf -I/usr/include/$(clang -print-multiarch) -DVID=10 -c vlan_tag.bpf.c -o vid10.o
// and attached with `tc filter add dev eth0 egress|ingress bpf da obj vid10.o sec tag|untag`.
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#ifndef VID
#error "build with -DVID=<VLAN id>"
#endif

static long (*bpf_skb_vlan_push)(struct __sk_buff *skb, __u16 proto, __u16 tci) = (void *)BPF_FUNC_skb_vlan_push;
static long (*bpf_skb_vlan_pop)(struct __sk_buff *skb) = (void *)BPF_FUNC_skb_vlan_pop;

__attribute__((section("tag"), used)) int tag_frame(struct __sk_buff *skb)
{
    // 0x8100 in network order.
    return bpf_skb_vlan_push(skb, __builtin_bswap16(0x8100), VID) == 0 ? TC_ACT_OK : TC_ACT_SHOT;
}

__attribute__((section("untag"), used)) int untag_frame(struct __sk_buff *skb)
{
    // The kernel has moved a received frame's tag into the skb's metadata
    // by the time tc's ingress hook runs.
    if (!skb->vlan_present || skb->vlan_proto != __builtin_bswap16(0x8100) || (skb->vlan_tci & 0xfff) != VID)
        return TC_ACT_SHOT;
    return bpf_skb_vlan_pop(skb) == 0 ? TC_ACT_OK : TC_ACT_SHOT;
}

char _license[] __attribute__((section("license"), used)) = "GPL";
