//! Port MTUs (`mtu` on an `[[interface]]`), end to end on net_pcap ports
//! (their frames may be of any size; the veths of `e2e.rs` are driven by
//! net_af_packet, whose DPDK 22.11 PMD takes no MTU above 1500). Port 0 at
//! 9,000, port 1 at 1,500: frames of up to 9,000 bytes of IP arrive whole
//! (lbd's buffers are sized for the largest MTU), a datagram too big for
//! port 1 with DF is answered on port 0 with an ICMP "fragmentation
//! needed" carrying 1,500, one without DF is dropped (`mtu_exceeded`), one
//! that fits goes on (its backend asked for on port 1), and a jumbo echo
//! request to lbd's address is answered whole.
mod common;

use common::pcap;

const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xc1];
/// net_pcap's MAC for its port 0 ("pcap" and the port's index). lbd sends
/// no ICMP error for a frame to a broadcast or multicast MAC.
const LBD0_MAC: [u8; 6] = [2, 0x70, 0x63, 0x61, 0x70, 0];
const CLIENT: [u8; 4] = [10, 74, 1, 2];
const LBD0: [u8; 4] = [10, 74, 1, 1];
const VIP: [u8; 4] = [10, 74, 1, 100];
const BACKEND: [u8; 4] = [10, 74, 2, 11];

/// An IPv4 packet from the client to `dst` of protocol `proto` carrying
/// `l4`, DF as `df`, in a frame to port 0.
fn ipv4(dst: [u8; 4], proto: u8, df: bool, l4: &[u8]) -> Vec<u8> {
    let total = (20 + l4.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, if df { 0x40 } else { 0 }, 0, 64, proto, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&CLIENT);
    ip.extend_from_slice(&dst);
    let c = pcap::internet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(l4);
    let mut f = LBD0_MAC.to_vec();
    f.extend_from_slice(&CLIENT_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ip);
    f
}

/// A UDP datagram (checksum 0) to the VIP's port 53 whose IP packet is
/// `ip_len` bytes.
fn udp(ip_len: usize, sport: u16, df: bool) -> Vec<u8> {
    let mut l4 = sport.to_be_bytes().to_vec();
    l4.extend_from_slice(&53u16.to_be_bytes());
    l4.extend_from_slice(&((ip_len - 20) as u16).to_be_bytes());
    l4.extend_from_slice(&[0, 0]);
    l4.resize(ip_len - 20, 0x5a);
    ipv4(VIP, 17, df, &l4)
}

/// An echo request to lbd's port 0 address whose IP packet is `ip_len`
/// bytes.
fn ping(ip_len: usize) -> Vec<u8> {
    let mut l4 = vec![8, 0, 0, 0, 0, 7, 0, 1];
    l4.resize(ip_len - 20, 0xa5);
    let c = pcap::internet_checksum(&l4);
    l4[2..4].copy_from_slice(&c.to_be_bytes());
    ipv4(LBD0, 1, true, &l4)
}

/// (source, destination, ICMP type, code, bytes 4-8 of the ICMP header,
/// the ICMP message) of an IPv4 ICMP frame.
#[allow(clippy::type_complexity)]
fn icmp(f: &[u8]) -> Option<([u8; 4], [u8; 4], u8, u8, [u8; 4], &[u8])> {
    if f.len() < 42 || f[12..14] != [0x08, 0x00] || f[23] != 1 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
    let ip = f.get(14..14 + total)?;
    let m = &ip[20..];
    Some((
        ip[12..16].try_into().unwrap(),
        ip[16..20].try_into().unwrap(),
        m[0],
        m[1],
        m[4..8].try_into().unwrap(),
        m,
    ))
}

#[test]
fn jumbo_frames_and_packets_too_big_for_the_egress_port() {
    let too_big = udp(4000, 40000, true);
    let ran = pcap::run(
        "mtu",
        "[[interface]]\naddress = \"10.74.1.1/24\"\nmtu = 9000\n\n\
         [[interface]]\naddress = \"10.74.2.1/24\"\nmtu = 1500\n\n\
         [[service]]\nname = \"default/dns\"\nmode = \"dnat\"\n\n\
         [[service.frontend]]\naddress = \"10.74.1.100:53\"\nprotocol = \"udp\"\n\n\
         [[service.backend]]\naddress = \"10.74.2.11:5353\"\n",
        &[
            too_big.clone(),
            udp(8000, 40001, false),
            udp(1500, 40002, true),
            ping(9000),
        ],
        &[],
    );
    let (log, [out0, out1]) = (&ran.log, &ran.out);
    assert!(log.contains("mtu=9000") && log.contains("mtu=1500"), "{log}");

    let answers: Vec<_> = out0.iter().filter_map(|f| icmp(f)).collect();
    // What port 0 sent, briefly: (type, code, length).
    let sent: Vec<_> = answers.iter().map(|a| (a.2, a.3, a.5.len())).collect();
    // The datagram too big for port 1, answered from port 0's address
    // with port 1's MTU, quoting its start (576 bytes in all).
    let frag_needed: Vec<_> = answers.iter().filter(|a| (a.2, a.3) == (3, 4)).collect();
    assert_eq!(frag_needed.len(), 1, "{sent:?}\n{log}");
    let (src, dst, _, _, rest, m) = frag_needed[0];
    assert_eq!((*src, *dst), (LBD0, CLIENT));
    assert_eq!(u16::from_be_bytes([rest[2], rest[3]]), 1500);
    assert_eq!(m.len(), 576 - 20);
    assert_eq!(&m[8..], &too_big[14..14 + 576 - 28]);
    assert_eq!(pcap::internet_checksum(m), 0, "ICMP checksum");
    // The jumbo echo request answered whole, out of port 0.
    let echo: Vec<_> = answers.iter().filter(|a| a.2 == 0).collect();
    assert_eq!(echo.len(), 1, "{sent:?}");
    assert_eq!((echo[0].0, echo[0].1, echo[0].5.len()), (LBD0, CLIENT, 9000 - 20));
    // The datagram that fits waits for its backend, asked for on port 1.
    let asked = out1
        .iter()
        .any(|f| f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[38..42] == BACKEND);
    assert!(asked, "{log}");
    // Summary counters: one answered, one without DF dropped, nothing in
    // pieces (each frame fit one buffer).
    assert!(log.contains("too_big_sent 1"), "{log}");
    assert!(
        log.contains("mtu_exceeded=1)") || log.contains("mtu_exceeded=1,"),
        "{log}"
    );
    assert!(!log.contains("multi_segment"), "{log}");
}
