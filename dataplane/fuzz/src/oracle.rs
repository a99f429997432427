//! The output oracle of the packet fuzz targets: a frame the balancer
//! sends must carry correct checksums and lengths. Shared, by `#[path]`,
//! by the `handle_packet` and `burst` targets (through `harness.rs` and
//! `burst.rs`) and by lb-dataplane's `tests/corpus_replay.rs`.
//!
//! [`check`] takes one `handle_packet` (or `handle_burst`) call: the frame
//! as it went in, its `PacketMeta`, the verdict and the frame as it came
//! out. When the verdict sends bytes (`Transmit`, `Resolve`,
//! `ReplyToNeighbor`), the meta asks for no checksum offload and every
//! checksum of the input verifies, every checksum of the `len` bytes sent
//! must verify too, by a full recomputation here (independent of
//! `lb_dataplane::checksum`):
//!
//! - the IPv4 header checksum (options included);
//! - TCP, UDP and ICMPv6 checksums with their pseudo-header, ICMPv4
//!   checksums, over the whole datagram; not for fragments (a fragment's
//!   L4 checksum covers bytes it does not hold). UDP over IPv4 with
//!   checksum 0 ("none") passes; UDP over IPv6 with checksum 0 fails
//!   (RFC 8200 §8.1), so such an input is never "valid";
//! - in an ICMPv4 or ICMPv6 error, the quoted IPv4 header's checksum when
//!   the quote holds the whole header, and the quoted TCP/UDP/ICMP(v6)
//!   checksum when the quote holds the whole quoted datagram (its total /
//!   payload length fits, and it is not a fragment). A quote cut short
//!   cannot be checked (`nat/icmp_error.rs` updates its L4 checksum
//!   incrementally, right for the whole datagram but unverifiable); only
//!   the outer ICMP checksum, over the quote as sent, covers it.
//!
//! And the lengths: the IPv4 total length / IPv6 payload length (ARP: its
//! 28 bytes) must fit in the bytes sent, and when the input's own length
//! fields matched its frame (the frame ends with the IP packet, or is at
//! most 60 bytes: Ethernet padding), the output's must match what is sent
//! in the same sense.
//!
//! Offload (any flag set): nothing is checked (under `tx_ipv4`/`tx_l4`
//! the NIC completes the checksums, under `rx_l4_partial` the input holds
//! only pseudo-header sums). A violation panics with the input, the
//! output and what is wrong, in hex.

use std::fmt::Write as _;

use lb_dataplane::checksum::ChecksumOffload;
use lb_dataplane::worker::{PacketMeta, Verdict};

/// The longest frame that may end in Ethernet padding (no FCS).
const MIN_FRAME: usize = 60;

/// The one's complement sum of `data` as big-endian 16-bit words (RFC
/// 1071), an odd last byte padded with zero, not folded.
fn sum(data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(2);
    let mut acc: u64 = chunks
        .by_ref()
        .map(|w| u64::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    if let [b] = chunks.remainder() {
        acc += u64::from(*b) << 8;
    }
    acc
}

/// Whether a sum of a message with its checksum field in it verifies.
fn verifies(mut acc: u64) -> bool {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc == 0xffff
}

/// The addresses of an IP header (source then destination), for its
/// pseudo-header.
#[derive(Clone, Copy)]
struct Addrs {
    bytes: [u8; 32],
    v6: bool,
}

impl Addrs {
    fn v4(a: &[u8]) -> Addrs {
        let mut bytes = [0; 32];
        bytes[..8].copy_from_slice(&a[..8]);
        Addrs { bytes, v6: false }
    }

    fn v6(a: &[u8]) -> Addrs {
        let mut bytes = [0; 32];
        bytes.copy_from_slice(&a[..32]);
        Addrs { bytes, v6: true }
    }

    /// The pseudo-header sum for `proto` over `len` bytes of L4.
    fn pseudo(self, proto: u8, len: usize) -> u64 {
        sum(&self.bytes) + u64::from(proto) + (len as u64 >> 16) + (len as u64 & 0xffff)
    }
}

/// The checksum to write over a message whose sum (checksum field zero)
/// is `acc`.
fn finish(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn be16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

/// What [`inspect`] found in a frame.
#[derive(Default)]
struct Inspection {
    /// Checks that failed, or why a header could not be read.
    problems: Vec<String>,
    /// Where the IP packet (or ARP message) ends: `None` for another
    /// EtherType.
    end: Option<usize>,
}

impl Inspection {
    fn fail(&mut self, what: String) {
        self.problems.push(what);
    }
}

/// Whether the quoted packet of an error is checked (inner) or the frame's
/// own (outer): a malformed inner packet is not a failure, only unchecked.
#[derive(Clone, Copy, PartialEq)]
enum Depth {
    Outer,
    Quoted,
}

/// Every check on `frame`.
fn inspect(frame: &[u8]) -> Inspection {
    let mut r = Inspection::default();
    if frame.len() < 14 {
        r.fail(format!("{}-byte frame: no Ethernet header", frame.len()));
        return r;
    }
    let (ethertype, l3) = match be16(frame, 12) {
        0x8100 if frame.len() >= 18 => (be16(frame, 16), 18),
        0x8100 => {
            r.fail("tagged frame cut inside the tag".into());
            return r;
        }
        t => (t, 14),
    };
    let b = &frame[l3..];
    match ethertype {
        0x0800 => {
            if let Some(len) = ipv4(&mut r, b, Depth::Outer) {
                r.end = Some(l3 + len);
            }
        }
        0x86dd => {
            if let Some(len) = ipv6(&mut r, b, Depth::Outer) {
                r.end = Some(l3 + len);
            }
        }
        0x0806 if b.len() >= 28 => r.end = Some(l3 + 28),
        0x0806 => r.fail(format!("ARP of {} bytes", b.len())),
        _ => {}
    }
    r
}

/// Checks the IPv4 packet at the start of `b`; returns its total length,
/// `None` if the header cannot be read.
fn ipv4(r: &mut Inspection, b: &[u8], depth: Depth) -> Option<usize> {
    let tag = if depth == Depth::Quoted { "quoted " } else { "" };
    if b.len() < 20 || b[0] >> 4 != 4 || b[0] & 0xf < 5 || usize::from(b[0] & 0xf) * 4 > b.len() {
        if depth == Depth::Outer {
            r.fail(format!("no IPv4 header in {} bytes", b.len()));
        }
        return None;
    }
    let hlen = usize::from(b[0] & 0xf) * 4;
    if !verifies(sum(&b[..hlen])) {
        r.fail(format!("{tag}IPv4 header checksum {:#06x}", be16(b, 10)));
    }
    let total = be16(b, 2);
    if total < hlen || total > b.len() {
        // A quote cut short: its L4 cannot be checked.
        if depth == Depth::Outer {
            r.fail(format!(
                "IPv4 total length {total} with a {hlen}-byte header in {} bytes",
                b.len()
            ));
        }
        return None;
    }
    // MF or a fragment offset: the L4 checksum covers other fragments.
    if be16(b, 6) & 0x3fff == 0 {
        l4(r, Addrs::v4(&b[12..20]), b[9], &b[hlen..total], depth);
    }
    Some(total)
}

/// Checks the IPv6 packet at the start of `b`; returns its length (40 +
/// payload length), `None` if it cannot be read.
fn ipv6(r: &mut Inspection, b: &[u8], depth: Depth) -> Option<usize> {
    let outer = depth == Depth::Outer;
    if b.len() < 40 || b[0] >> 4 != 6 {
        if outer {
            r.fail(format!("no IPv6 header in {} bytes", b.len()));
        }
        return None;
    }
    let end = 40 + be16(b, 4);
    if end > b.len() {
        if outer {
            r.fail(format!("IPv6 payload length {} in {} bytes", end - 40, b.len()));
        }
        return None;
    }
    match upper(b[6], &b[40..end]) {
        Upper::L4(next, at) => l4(r, Addrs::v6(&b[8..40]), next, &b[40 + at..end], depth),
        Upper::Unchecked => {}
        Upper::Malformed(what) => {
            if outer {
                r.fail(what);
            }
            return None;
        }
    }
    Some(end)
}

/// Where an IPv6 payload's upper layer starts.
enum Upper {
    /// Its protocol and offset in the payload.
    L4(u8, usize),
    /// A fragment, or a routing header with segments left (the
    /// pseudo-header's destination is another address): not checked.
    Unchecked,
    /// An extension header cut short.
    Malformed(String),
}

/// Walks the extension headers lb-dataplane walks (`wire::ipv6`):
/// hop-by-hop, routing, destination options, fragment.
fn upper(mut next: u8, payload: &[u8]) -> Upper {
    let mut at = 0;
    loop {
        match next {
            0 | 43 | 60 => {
                let Some(h) = payload.get(at..at + 2) else {
                    return Upper::Malformed(format!("IPv6 extension header {next} cut short"));
                };
                let len = (usize::from(h[1]) + 1) * 8;
                if at + len > payload.len() {
                    return Upper::Malformed(format!("IPv6 extension header {next} cut short"));
                }
                if next == 43 && payload[at + 3] != 0 {
                    return Upper::Unchecked;
                }
                next = h[0];
                at += len;
            }
            44 => {
                let Some(h) = payload.get(at..at + 8) else {
                    return Upper::Malformed("IPv6 fragment header cut short".into());
                };
                if be16(h, 2) & 0xfff9 != 0 {
                    // A fragment (not an atomic one).
                    return Upper::Unchecked;
                }
                next = h[0];
                at += 8;
            }
            _ => return Upper::L4(next, at),
        }
    }
}

/// Checks a whole (unfragmented) L4 datagram `d` of protocol `proto`.
fn l4(r: &mut Inspection, addrs: Addrs, proto: u8, d: &[u8], depth: Depth) {
    let outer = depth == Depth::Outer;
    let tag = if outer { "" } else { "quoted " };
    let v6 = addrs.v6;
    match (proto, v6) {
        (6, _) => {
            if d.len() < 20 {
                if outer {
                    r.fail(format!("TCP of {} bytes", d.len()));
                }
                return;
            }
            if !verifies(addrs.pseudo(6, d.len()) + sum(d)) {
                r.fail(format!("{tag}TCP checksum {:#06x}", be16(d, 16)));
            }
        }
        (17, _) => {
            let ulen = if d.len() >= 8 { be16(d, 4) } else { 0 };
            if !(8..=d.len()).contains(&ulen) {
                if outer {
                    r.fail(format!("UDP length {ulen} in {} bytes", d.len()));
                }
                return;
            }
            let csum = be16(d, 6);
            if csum == 0 {
                if v6 {
                    r.fail(format!("{tag}UDP over IPv6 with checksum 0"));
                }
                return;
            }
            if !verifies(addrs.pseudo(17, ulen) + sum(&d[..ulen])) {
                r.fail(format!("{tag}UDP checksum {csum:#06x}"));
            }
        }
        (1, false) | (58, true) => {
            if d.len() < 8 {
                if outer {
                    r.fail(format!("ICMP of {} bytes", d.len()));
                }
                return;
            }
            let pseudo = if v6 { addrs.pseudo(58, d.len()) } else { 0 };
            if !verifies(pseudo + sum(d)) {
                r.fail(format!("{tag}ICMP checksum {:#06x}", be16(d, 2)));
            }
            let error = if v6 {
                d[0] < 128
            } else {
                matches!(d[0], 3 | 4 | 5 | 11 | 12)
            };
            // The quote of an error; not the quote's quote.
            if error && outer {
                let q = &d[8..];
                if v6 {
                    ipv6(r, q, Depth::Quoted);
                } else {
                    ipv4(r, q, Depth::Quoted);
                }
            }
        }
        _ => {}
    }
}

/// `frame` with every checksum the oracle checks recomputed (the quoted
/// datagram's before the error's own), so that an input the fuzzer
/// mutated is one the oracle applies to. Lengths are left as they are;
/// what cannot be read is left unchanged.
pub fn repair(frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    if f.len() < 14 {
        return f;
    }
    let (ethertype, l3) = match be16(&f, 12) {
        0x8100 if f.len() >= 18 => (be16(&f, 16), 18),
        t => (t, 14),
    };
    match ethertype {
        0x0800 => repair_ipv4(&mut f[l3..], false),
        0x86dd => repair_ipv6(&mut f[l3..], false),
        _ => {}
    }
    f
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn repair_ipv4(b: &mut [u8], quoted: bool) {
    if b.len() < 20 || b[0] >> 4 != 4 || b[0] & 0xf < 5 || usize::from(b[0] & 0xf) * 4 > b.len() {
        return;
    }
    let hlen = usize::from(b[0] & 0xf) * 4;
    let total = be16(b, 2);
    if (hlen..=b.len()).contains(&total) && be16(b, 6) & 0x3fff == 0 {
        let addrs = Addrs::v4(&b[12..20]);
        let proto = b[9];
        repair_l4(addrs, proto, &mut b[hlen..total], quoted);
    }
    put16(b, 10, 0);
    let c = finish(sum(&b[..hlen]));
    put16(b, 10, c);
}

fn repair_ipv6(b: &mut [u8], quoted: bool) {
    if b.len() < 40 || b[0] >> 4 != 6 || 40 + be16(b, 4) > b.len() {
        return;
    }
    let end = 40 + be16(b, 4);
    if let Upper::L4(next, at) = upper(b[6], &b[40..end]) {
        let addrs = Addrs::v6(&b[8..40]);
        repair_l4(addrs, next, &mut b[40 + at..end], quoted);
    }
}

fn repair_l4(addrs: Addrs, proto: u8, d: &mut [u8], quoted: bool) {
    match (proto, addrs.v6) {
        (6, _) if d.len() >= 20 => {
            put16(d, 16, 0);
            let c = finish(addrs.pseudo(6, d.len()) + sum(d));
            put16(d, 16, c);
        }
        (17, v6) if d.len() >= 8 && (8..=d.len()).contains(&be16(d, 4)) => {
            // UDP over IPv4 without a checksum stays so.
            if !v6 && be16(d, 6) == 0 {
                return;
            }
            let ulen = be16(d, 4);
            put16(d, 6, 0);
            let c = finish(addrs.pseudo(17, ulen) + sum(&d[..ulen]));
            put16(d, 6, if c == 0 { 0xffff } else { c });
        }
        (1, false) | (58, true) if d.len() >= 8 => {
            let v6 = addrs.v6;
            let error = if v6 {
                d[0] < 128
            } else {
                matches!(d[0], 3 | 4 | 5 | 11 | 12)
            };
            if error && !quoted {
                if v6 {
                    repair_ipv6(&mut d[8..], true);
                } else {
                    repair_ipv4(&mut d[8..], true);
                }
            }
            put16(d, 2, 0);
            let pseudo = if v6 { addrs.pseudo(58, d.len()) } else { 0 };
            let c = finish(pseudo + sum(d));
            put16(d, 2, c);
        }
        _ => {}
    }
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// The bytes a verdict sends, if any.
fn sent_len(v: &Verdict) -> Option<usize> {
    match *v {
        Verdict::Transmit { len, .. }
        | Verdict::Resolve { len, .. }
        | Verdict::ReplyToNeighbor { len, .. } => Some(len),
        Verdict::Drop(_) | Verdict::HandOver(_) | Verdict::Neighbor { .. } | Verdict::ToHost => None,
    }
}

/// Checks one call: `input` went in with `meta`, `v` came out with the
/// frame rewritten into `output` (its whole buffer; the verdict says how
/// much is sent). Panics on a violation; see the module doc. Returns
/// whether the output was checked.
pub fn check(input: &[u8], meta: &PacketMeta, v: &Verdict, output: &[u8]) -> bool {
    let Some(len) = sent_len(v) else {
        return false;
    };
    if meta.offload != ChecksumOffload::NONE {
        return false;
    }
    let before = inspect(input);
    if !before.problems.is_empty() {
        return false;
    }
    let sent = &output[..len.min(output.len())];
    let mut after = inspect(sent);
    if let Some(end) = after.end {
        // `inspect` fails a packet longer than its frame.
        let padded = |len: usize, end: usize| len == end || len <= MIN_FRAME;
        if before.end.is_some_and(|e| padded(input.len(), e)) && !padded(len, end) {
            after.fail(format!("{len} bytes sent, the packet ends at {end}"));
        }
    }
    if !after.problems.is_empty() {
        panic!(
            "oracle: {v:?} on port {} sends a frame with {}\n  input  ({} bytes): {}\n  output ({len} bytes): {}",
            meta.port,
            after.problems.join("; "),
            input.len(),
            hex(input),
            hex(sent),
        );
    }
    true
}
