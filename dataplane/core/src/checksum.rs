//! Internet checksums: full (RFC 1071) and incremental (RFC 1624).
//!
//! A *partial sum* here is a `u32` holding a one's complement sum that has not
//! been complemented yet. Partial sums of disjoint, even-length parts of a
//! message add up (with [`combine`] or plain `+` for a handful of them); only
//! the last part may have an odd length, because [`sum`] pads an odd final
//! byte as the high byte of a word. [`finish`] folds and complements.
//!
//! Incremental updates use RFC 1624 eqn. 3, `HC' = ~(~HC + ~m + m')`, which
//! never produces the `-0` problem of eqn. 2. [`ChecksumDelta`] accumulates
//! the `~m + m'` terms once, so one address rewrite can be applied to both the
//! IPv4 header checksum and the L4 checksum.
//!
//! Invariant relied on by the NAT code: for any message that contains a
//! non-zero word (every IP header, and every L4 pseudo-header since the
//! protocol number is non-zero), an incremental update gives exactly the value
//! a full recomputation gives; the property tests at the bottom check it.
//!
//! UDP: over IPv4 a zero checksum means "not computed" and stays zero after a
//! rewrite; a computed zero is sent as `0xFFFF` ([`udp_finish`],
//! [`ChecksumDelta::apply_udp`]). Over IPv6 a zero UDP checksum is invalid.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Fold a 32-bit one's complement accumulator to 16 bits with end-around carry.
#[inline]
pub fn fold(sum: u32) -> u16 {
    // The high half of `sum + rotl(sum, 16)` is `hi + lo` plus the carry
    // out of the low half's `lo + hi`: the end-around-carry sum in one add
    // (four instructions where folding twice took six).
    (sum.wrapping_add(sum.rotate_left(16)) >> 16) as u16
}

/// Fold and complement a partial sum: the value to write in a checksum field.
#[inline]
pub fn finish(sum: u32) -> u16 {
    !fold(sum)
}

/// Add two partial sums without losing carries.
#[inline]
pub fn combine(a: u32, b: u32) -> u32 {
    let (s, carry) = a.overflowing_add(b);
    s.wrapping_add(u32::from(carry))
}

/// The partial sum of `data` as big-endian 16-bit words (RFC 1071); an odd
/// final byte is padded with a zero low byte. The result is folded to at most
/// `0xFFFF`, so a few of them can be added with `+`.
#[inline]
pub fn sum(data: &[u8]) -> u32 {
    // 32-bit words into a 64-bit accumulator: since 2^16 == 1 (mod 2^16 - 1),
    // summing 32-bit big-endian words is the same one's complement sum.
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        acc += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        acc += u64::from(u32::from_be_bytes([c[4], c[5], c[6], c[7]]));
    }
    let mut rest = chunks.remainder();
    if rest.len() >= 4 {
        acc += u64::from(u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]));
        rest = &rest[4..];
    }
    if rest.len() >= 2 {
        acc += u64::from(u16::from_be_bytes([rest[0], rest[1]]));
        rest = &rest[2..];
    }
    if let Some(&b) = rest.first() {
        acc += u64::from(b) << 8;
    }
    // Fold 64 -> 32 -> 16 with end-around carries.
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    u32::from(fold(acc as u32))
}

/// Whether a 20-byte header (an IPv4 header without options, checksum
/// field included) sums to `0xFFFF`, i.e. `fold(sum(h)) == 0xFFFF`: the
/// fast path's per-packet check. The one's complement sum commutes with a
/// byte swap of every 16-bit word and `0xFFFF` is its own swap, so the
/// words are added in the machine's order: three loads and two carries
/// instead of five byte-swapped words (~35 instructions down to ~15).
#[inline(always)]
pub fn sums_to_ones20(h: &[u8; 20]) -> bool {
    let (a, rest) = h.split_first_chunk::<8>().expect("20 >= 8");
    let (b, c) = rest.split_first_chunk::<8>().expect("12 >= 8");
    let c: &[u8; 4] = c.try_into().expect("20 - 16 == 4");
    let (s, c1) = u64::from_ne_bytes(*a).overflowing_add(u64::from_ne_bytes(*b));
    let (s, c2) = s.overflowing_add(u64::from(u32::from_ne_bytes(*c)));
    // Each end-around carry is worth 1 (2^64 == 1 mod 2^16 - 1); adding
    // both to a sum that just overflowed cannot overflow again.
    let s = s.wrapping_add(u64::from(c1) + u64::from(c2));
    // 64 to 32 bits as `fold` does 32 to 16.
    fold((s.wrapping_add(s.rotate_left(32)) >> 32) as u32) == 0xffff
}

/// The Internet checksum of `data` (checksum field, if inside, zeroed first).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data))
}

/// The partial sum of the IPv4 pseudo-header (RFC 793/768): addresses, zero,
/// protocol and the L4 length.
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4_len: u16) -> u32 {
    let s = u32::from(src);
    let d = u32::from(dst);
    (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + u32::from(protocol) + u32::from(l4_len)
}

/// The partial sum of the IPv6 pseudo-header (RFC 8200 §8.1): addresses,
/// upper-layer packet length and next header.
#[inline]
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, l4_len: u32) -> u32 {
    let s = sum(&src.octets()) + sum(&dst.octets());
    s + (l4_len >> 16) + (l4_len & 0xffff) + u32::from(next_header)
}

/// The full TCP/UDP/ICMPv6-style checksum over an IPv4 pseudo-header and the
/// L4 bytes (whose checksum field must be zero). For UDP use [`udp_finish`].
#[inline]
pub fn l4_checksum_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4: &[u8]) -> u16 {
    finish(pseudo_header_v4(src, dst, protocol, l4.len() as u16) + sum(l4))
}

/// The full L4 checksum over an IPv6 pseudo-header and the L4 bytes (whose
/// checksum field must be zero). For UDP use [`udp_finish`].
#[inline]
pub fn l4_checksum_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, l4: &[u8]) -> u16 {
    finish(pseudo_header_v6(src, dst, next_header, l4.len() as u32) + sum(l4))
}

/// Whether L4 bytes (checksum field included, as received) verify against
/// the pseudo-header partial sum `pseudo`.
#[inline]
pub fn verify_l4(pseudo: u32, l4: &[u8]) -> bool {
    fold(pseudo + sum(l4)) == 0xffff
}

/// Complement a finished UDP sum: a computed zero is sent as `0xFFFF`, since
/// zero on the wire means "no checksum" (RFC 768).
#[inline]
pub fn udp_finish(sum: u32) -> u16 {
    match finish(sum) {
        0 => 0xffff,
        c => c,
    }
}

/// The non-complemented, folded pseudo-header sum that DPDK's L4 transmit
/// offload expects in the TCP/UDP checksum field (`rte_ipv4_phdr_cksum`).
#[inline]
pub fn offload_pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4_len: u16) -> u16 {
    fold(pseudo_header_v4(src, dst, protocol, l4_len))
}

/// IPv6 variant of [`offload_pseudo_v4`] (`rte_ipv6_phdr_cksum`).
#[inline]
pub fn offload_pseudo_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, l4_len: u32) -> u16 {
    fold(pseudo_header_v6(src, dst, next_header, l4_len))
}

/// RFC 1624 update of checksum `csum` for one 16-bit word `old` -> `new`.
#[inline]
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    ChecksumDelta::new().add16(old, new).apply(csum)
}

/// RFC 1624 update for a 32-bit value (an IPv4 address as `u32::from(addr)`).
#[inline]
pub fn update32(csum: u16, old: u32, new: u32) -> u16 {
    ChecksumDelta::new().add32(old, new).apply(csum)
}

/// RFC 1624 update for a 128-bit value (an IPv6 address as `u128::from(addr)`).
#[inline]
pub fn update128(csum: u16, old: u128, new: u128) -> u16 {
    ChecksumDelta::new().add128(old, new).apply(csum)
}

/// An accumulated set of word changes (`~m + m'` terms of RFC 1624), to apply
/// to one or more checksums that cover those words.
///
/// An IPv4 address change goes into both the IPv4 header checksum and the
/// TCP/UDP checksum (pseudo-header); a port change only into the latter, so
/// the NAT code builds one delta for addresses, applies it to the header
/// checksum, then adds the ports and applies it to the L4 checksum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChecksumDelta(u32);

impl ChecksumDelta {
    /// No change.
    #[inline]
    pub const fn new() -> Self {
        ChecksumDelta(0)
    }

    /// Record that a 16-bit word changed from `old` to `new`.
    #[inline]
    #[must_use]
    pub fn add16(self, old: u16, new: u16) -> Self {
        // Kept folded below 2^17 so any number of adds cannot overflow.
        ChecksumDelta(u32::from(fold(self.0 + u32::from(!old) + u32::from(new))))
    }

    /// Record that a 32-bit value (two words) changed.
    #[inline]
    #[must_use]
    pub fn add32(self, old: u32, new: u32) -> Self {
        self.add16((old >> 16) as u16, (new >> 16) as u16)
            .add16(old as u16, new as u16)
    }

    /// Record that a 128-bit value (eight words) changed.
    #[inline]
    #[must_use]
    pub fn add128(self, old: u128, new: u128) -> Self {
        self.add32((old >> 96) as u32, (new >> 96) as u32)
            .add32((old >> 64) as u32, (new >> 64) as u32)
            .add32((old >> 32) as u32, (new >> 32) as u32)
            .add32(old as u32, new as u32)
    }

    /// Record an IPv4 address change.
    #[inline]
    #[must_use]
    pub fn add_ipv4(self, old: Ipv4Addr, new: Ipv4Addr) -> Self {
        self.add32(u32::from(old), u32::from(new))
    }

    /// Record an IPv6 address change.
    #[inline]
    #[must_use]
    pub fn add_ipv6(self, old: &Ipv6Addr, new: &Ipv6Addr) -> Self {
        self.add128(u128::from(*old), u128::from(*new))
    }

    /// Apply to a complemented checksum field (IPv4 header, TCP, ICMP).
    #[inline]
    pub fn apply(self, csum: u16) -> u16 {
        !fold(u32::from(!csum) + self.0)
    }

    /// Apply to a UDP checksum field: zero ("none", IPv4 only) stays zero and
    /// a result of zero is written as `0xFFFF`.
    #[inline]
    pub fn apply_udp(self, csum: u16) -> u16 {
        if csum == 0 {
            return 0;
        }
        match self.apply(csum) {
            0 => 0xffff,
            c => c,
        }
    }

    /// Apply to a field that holds a non-complemented pseudo-header sum, as a
    /// received packet with [`ChecksumOffload::rx_l4_partial`] or one prepared
    /// for L4 transmit offload does. Only pseudo-header changes (addresses,
    /// length) belong in such a delta: the NIC sums the ports itself.
    #[inline]
    pub fn apply_partial(self, partial: u16) -> u16 {
        fold(u32::from(partial) + self.0)
    }
}

/// Checksum offload state for one packet, set by the DPDK shell from the mbuf
/// flags and the port's capabilities; the pipeline itself never guesses.
///
/// All `false` (the [`Default`]) means software does everything: parse
/// verifies the IPv4 header checksum and NAT updates every checksum
/// incrementally.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChecksumOffload {
    /// RX: the NIC verified the IPv4 header checksum and found it good
    /// (`RTE_MBUF_F_RX_IP_CKSUM_GOOD`), so parsing skips the check. The shell
    /// drops packets the NIC marked bad, or leaves this `false`.
    pub rx_ipv4_verified: bool,
    /// RX: the L4 checksum field holds only the pseudo-header sum, not a full
    /// checksum (virtio `NEEDS_CSUM`, `RTE_MBUF_F_RX_L4_CKSUM_NONE` from a
    /// local sender). NAT must adjust it with
    /// [`ChecksumDelta::apply_partial`] for address changes only, and nothing
    /// may verify it.
    pub rx_l4_partial: bool,
    /// TX: the NIC fills the IPv4 header checksum (`RTE_MBUF_F_TX_IP_CKSUM`);
    /// NAT writes 0 there instead of updating it.
    pub tx_ipv4: bool,
    /// TX: the NIC fills the TCP/UDP checksum (`RTE_MBUF_F_TX_{TCP,UDP}_CKSUM`);
    /// NAT writes [`offload_pseudo_v4`]/[`offload_pseudo_v6`] of the new
    /// addresses instead of updating it.
    pub tx_l4: bool,
}

impl ChecksumOffload {
    /// No offload at all: everything in software.
    pub const NONE: ChecksumOffload = ChecksumOffload {
        rx_ipv4_verified: false,
        rx_l4_partial: false,
        tx_ipv4: false,
        tx_l4: false,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 1071 reference: plain 16-bit word loop.
    fn reference_sum(data: &[u8]) -> u32 {
        let mut acc: u32 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from(c[0]) << 8
            };
            acc = combine(acc, u32::from(w));
        }
        u32::from(fold(acc))
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn ipv4_header_known_checksum() {
        // A textbook header (Wikipedia "IPv4 header checksum"): checksum b861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01,
            0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(fold(sum(&h)), 0xffff);
    }

    #[test]
    fn rfc1624_minus_zero_case() {
        // RFC 1624 §4: HC = 0xDD2F, m = 0x5555 -> m' = 0x3285 gives 0x0000,
        // where eqn. 2 would give 0xFFFF.
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    #[test]
    fn udp_zero_rules() {
        let d = ChecksumDelta::new().add16(1, 2);
        assert_eq!(d.apply_udp(0), 0, "no checksum stays no checksum");
        // A delta that brings the checksum to 0 must yield 0xFFFF instead.
        let csum = 0x1234u16;
        let d = ChecksumDelta::new().add16(0, csum);
        assert_eq!(d.apply(csum), 0);
        assert_eq!(d.apply_udp(csum), 0xffff);
        assert_eq!(udp_finish(0xffff), 0xffff);
    }

    #[test]
    fn partial_apply_tracks_pseudo_header() {
        let (a, b, c) = (
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(192, 168, 7, 9),
        );
        let before = offload_pseudo_v4(a, b, 6, 40);
        let after = ChecksumDelta::new().add_ipv4(b, c).apply_partial(before);
        assert_eq!(after, offload_pseudo_v4(a, c, 6, 40));
    }

    /// The two-step fold `fold` replaced.
    fn fold_twice(mut sum: u32) -> u16 {
        sum = (sum & 0xffff) + (sum >> 16);
        sum = (sum & 0xffff) + (sum >> 16);
        sum as u16
    }

    #[test]
    fn fold_is_the_two_step_fold() {
        // Every low half with the high halves around the carry, and a
        // stride through the rest.
        for lo in 0..=0xffff_u32 {
            for hi in [
                0,
                1,
                2,
                0x7fff,
                0x8000,
                0xfffe,
                0xffff,
                0xffff - lo,
                (0x1_0000 - lo) & 0xffff,
            ] {
                let x = hi << 16 | lo;
                assert_eq!(fold(x), fold_twice(x), "{x:#x}");
            }
        }
        for x in (0..=u32::MAX).step_by(4099) {
            assert_eq!(fold(x), fold_twice(x), "{x:#x}");
        }
    }

    #[test]
    fn sums_to_ones20_edges() {
        // Both carries out of the 64-bit adds, and the two zeros.
        assert!(sums_to_ones20(&[0xff; 20]));
        assert!(!sums_to_ones20(&[0; 20]));
        let mut h = [0xff; 20];
        h[19] = 0xfe;
        assert!(!sums_to_ones20(&h));
        h[18] = 0xfe;
        h[19] = 0xff;
        assert!(!sums_to_ones20(&h));
        // 0xffff comes from words summing to 0xffff without any carry too.
        let mut h = [0; 20];
        h[0] = 0xff;
        h[11] = 0xff;
        assert!(sums_to_ones20(&h));
    }

    proptest! {
        #[test]
        fn sums_to_ones20_is_the_folded_check(mut h in prop::array::uniform20(any::<u8>()), fix in any::<bool>()) {
            if fix {
                // A header whose checksum field is right, as most are.
                h[10..12].copy_from_slice(&[0, 0]);
                let c = checksum(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
            }
            prop_assert_eq!(sums_to_ones20(&h), fold(sum(&h)) == 0xffff);
            prop_assert_eq!(sums_to_ones20(&h), fold(reference_sum(&h)) == 0xffff);
            if fix {
                prop_assert!(sums_to_ones20(&h));
            }
        }

        #[test]
        fn fold_matches_two_steps(x in any::<u32>()) {
            prop_assert_eq!(fold(x), fold_twice(x));
        }

        #[test]
        fn sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            prop_assert_eq!(sum(&data), reference_sum(&data));
        }

        #[test]
        fn sums_of_even_parts_combine(a in proptest::collection::vec(any::<u16>(), 0..40),
                                      b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let a: Vec<u8> = a.iter().flat_map(|w| w.to_be_bytes()).collect();
            let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
            prop_assert_eq!(fold(sum(&a) + sum(&b)), fold(sum(&whole)));
        }

        /// Random IPv4 header with a correct checksum; rewrite random 16-bit
        /// words and addresses incrementally; compare with recomputation.
        #[test]
        fn incremental_equals_full_ipv4_header(mut hdr in proptest::array::uniform20(any::<u8>()),
                                               word in 0usize..4, new16 in any::<u16>(),
                                               new_src in any::<u32>(), new_dst in any::<u32>()) {
            hdr[0] = 0x45;
            // A non-zero protocol keeps the header from ever summing to zero,
            // the one case where the two forms of zero differ.
            hdr[9] = 6;
            hdr[10] = 0;
            hdr[11] = 0;
            let c = checksum(&hdr);
            hdr[10..12].copy_from_slice(&c.to_be_bytes());
            let old = u16::from_be_bytes([hdr[2 * word], hdr[2 * word + 1]]);
            hdr[2 * word..2 * word + 2].copy_from_slice(&new16.to_be_bytes());
            let mut csum = update16(c, old, new16);
            let old_src = u32::from_be_bytes([hdr[12], hdr[13], hdr[14], hdr[15]]);
            let old_dst = u32::from_be_bytes([hdr[16], hdr[17], hdr[18], hdr[19]]);
            hdr[12..16].copy_from_slice(&new_src.to_be_bytes());
            hdr[16..20].copy_from_slice(&new_dst.to_be_bytes());
            csum = ChecksumDelta::new().add32(old_src, new_src).add32(old_dst, new_dst).apply(csum);
            let mut zeroed = hdr;
            zeroed[10] = 0;
            zeroed[11] = 0;
            prop_assert_eq!(csum, checksum(&zeroed));
        }

        /// TCP over IPv6: an address (pseudo-header) and port rewrite.
        #[test]
        fn incremental_equals_full_tcp_v6(src in any::<u128>(), dst in any::<u128>(), new_dst in any::<u128>(),
                                         mut seg in proptest::collection::vec(any::<u8>(), 20..80),
                                         new_port in any::<u16>()) {
            let (s, d, nd) = (Ipv6Addr::from(src), Ipv6Addr::from(dst), Ipv6Addr::from(new_dst));
            seg[16] = 0;
            seg[17] = 0;
            let c = l4_checksum_v6(&s, &d, 6, &seg);
            let old_port = u16::from_be_bytes([seg[2], seg[3]]);
            seg[2..4].copy_from_slice(&new_port.to_be_bytes());
            let inc = ChecksumDelta::new().add_ipv6(&d, &nd).add16(old_port, new_port).apply(c);
            prop_assert_eq!(inc, l4_checksum_v6(&s, &nd, 6, &seg));
            seg[16..18].copy_from_slice(&inc.to_be_bytes());
            prop_assert!(verify_l4(pseudo_header_v6(&s, &nd, 6, seg.len() as u32), &seg));
        }

        /// UDP over IPv4 with the UDP rules applied on both sides.
        #[test]
        fn incremental_equals_full_udp_v4(src in any::<u32>(), dst in any::<u32>(), new_dst in any::<u32>(),
                                         mut dgram in proptest::collection::vec(any::<u8>(), 8..64),
                                         new_port in any::<u16>()) {
            let (s, d, nd) = (Ipv4Addr::from(src), Ipv4Addr::from(dst), Ipv4Addr::from(new_dst));
            dgram[6] = 0;
            dgram[7] = 0;
            let len = dgram.len() as u16;
            let c = udp_finish(pseudo_header_v4(s, d, 17, len) + sum(&dgram));
            let old_port = u16::from_be_bytes([dgram[2], dgram[3]]);
            dgram[2..4].copy_from_slice(&new_port.to_be_bytes());
            let inc = ChecksumDelta::new().add_ipv4(d, nd).add16(old_port, new_port).apply_udp(c);
            let full = udp_finish(pseudo_header_v4(s, nd, 17, len) + sum(&dgram));
            prop_assert_eq!(inc, full);
        }
    }
}
