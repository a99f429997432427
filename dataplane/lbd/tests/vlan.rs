//! Tagged ports (`vlan` on every `[[interface]]`), end to end on net_pcap
//! ports: frames read from a pcap file per port, what lbd sends written to
//! another, so every frame is seen. (`e2e.rs` runs real connections over
//! tagged ports too, its namespaces tagging with tc BPF programs, since
//! the development kernels have no 802.1Q devices.) Every frame lbd sends
//! carries its port's VLAN id: the workers' ARP answer, the control
//! thread's gratuitous ARPs and its ARP request for the backend a tagged
//! datagram needs; an untagged frame is `vlan_mismatch`.
mod common;

use common::pcap;

const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xc1];

/// An Ethernet frame to `dst` from the client, tagged `vid` if given.
fn eth(dst: [u8; 6], vid: Option<u16>, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&CLIENT_MAC);
    if let Some(v) = vid {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    while f.len() < 60 {
        f.push(0);
    }
    f
}

/// Who has `target`? Tell `sender` (the client).
fn arp_request(vid: Option<u16>, sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
    a.extend_from_slice(&CLIENT_MAC);
    a.extend_from_slice(&sender);
    a.extend_from_slice(&[0; 6]);
    a.extend_from_slice(&target);
    eth([0xff; 6], vid, 0x0806, &a)
}

/// A UDP datagram (checksum 0) from `src` to `dst`, IPv4 header summed.
fn udp(vid: Option<u16>, dst_mac: [u8; 6], src: ([u8; 4], u16), dst: ([u8; 4], u16)) -> Vec<u8> {
    let body = b"tagged";
    let total = (20 + 8 + body.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src.0);
    ip.extend_from_slice(&dst.0);
    let sum = pcap::internet_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    ip.extend_from_slice(&src.1.to_be_bytes());
    ip.extend_from_slice(&dst.1.to_be_bytes());
    ip.extend_from_slice(&((8 + body.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend_from_slice(body);
    eth(dst_mac, vid, 0x0800, &ip)
}

/// (VLAN id, ARP operation, sender IP, target IP) of a tagged ARP frame.
fn tagged_arp(f: &[u8]) -> Option<(u16, u16, [u8; 4], [u8; 4])> {
    if f.len() < 46 || f[12..14] != [0x81, 0x00] || f[16..18] != [0x08, 0x06] {
        return None;
    }
    let a = &f[18..];
    let ip = |i: usize| -> [u8; 4] { a[i..i + 4].try_into().unwrap() };
    Some((
        u16::from_be_bytes([f[14], f[15]]) & 0xfff,
        u16::from_be_bytes([a[6], a[7]]),
        ip(14),
        ip(24),
    ))
}

#[test]
fn tagged_ports_send_and_answer_with_their_vlan() {
    let (lbd0, client, vip, backend) = ([10, 73, 1, 1], [10, 73, 1, 2], [10, 73, 1, 100], [10, 73, 2, 11]);
    // lbd's MAC on port 0 is unknown here: the datagram goes to broadcast,
    // which lbd takes as it takes any frame its port receives.
    let ran = pcap::run(
        "vlan",
        "[[interface]]\naddress = \"10.73.1.1/24\"\nvlan = 10\n\n\
         [[interface]]\naddress = \"10.73.2.1/24\"\nvlan = 20\n\n\
         [[service]]\nname = \"default/dns\"\nmode = \"dnat\"\n\n\
         [[service.frontend]]\naddress = \"10.73.1.100:53\"\nprotocol = \"udp\"\n\n\
         [[service.backend]]\naddress = \"10.73.2.11:5353\"\n",
        &[
            arp_request(Some(10), client, lbd0),
            arp_request(None, client, lbd0),
            arp_request(Some(20), client, lbd0),
            udp(Some(10), [0xff; 6], (client, 40000), (vip, 53)),
        ],
        &[],
    );
    let (log, [out0, out1]) = (&ran.log, &ran.out);
    for (port, out) in [(0, &out0), (1, &out1)] {
        assert!(!out.is_empty(), "port {port} sent nothing:\n{log}");
        assert!(
            out.iter().all(|f| f[12..14] == [0x81, 0x00]),
            "port {port}: every frame tagged: {out:02x?}"
        );
    }
    let arps0: Vec<_> = out0.iter().filter_map(|f| tagged_arp(f)).collect();
    let arps1: Vec<_> = out1.iter().filter_map(|f| tagged_arp(f)).collect();
    // The worker's answer to the tagged request, on VLAN 10, exactly once
    // (the untagged and the VLAN 20 requests are not port 0's).
    let replies: Vec<_> = arps0.iter().filter(|a| a.1 == 2).collect();
    assert_eq!(replies, [&(10, 2, lbd0, client)], "{arps0:?}");
    // Announcements of the interface addresses and the VIP on port 0, the
    // interface address on port 1, each with its port's id.
    assert!(arps0.contains(&(10, 1, lbd0, lbd0)), "{arps0:?}");
    assert!(arps0.contains(&(10, 1, vip, vip)), "{arps0:?}");
    assert!(
        arps1.contains(&(20, 1, [10, 73, 2, 1], [10, 73, 2, 1])),
        "{arps1:?}"
    );
    // The datagram's backend asked for on VLAN 20.
    assert!(arps1.contains(&(20, 1, [10, 73, 2, 1], backend)), "{arps1:?}");
    // Two frames not for port 0's VLAN.
    assert!(
        log.contains("vlan_mismatch=2)") || log.contains("vlan_mismatch=2,"),
        "{log}"
    );
    assert!(
        log.contains("vlan=Some(10)") && log.contains("vlan=Some(20)"),
        "{log}"
    );
}
