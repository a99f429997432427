//! The fixed hashes of the Maglev contract.
//!
//! Every function here is part of the cross-node, cross-version contract
//! (see [`RING_VERSION`](super::RING_VERSION)): a fleet of `lbd` nodes behind
//! ECMP only keeps a flow on one backend if they all hash it the same way.
//! So nothing here is seeded per process, and nothing comes from `std`'s
//! `DefaultHasher`/`RandomState`, whose output may change between Rust
//! releases. Changing any constant or encoding below is a ring-version bump;
//! the golden test in `tests/maglev_golden.rs` catches it.
//!
//! Two families:
//! - [`siphash24`]: SipHash-2-4 (Aumasson and Bernstein, 2012) with constant
//!   keys, for the build-time hashes (backend permutations, ring
//!   fingerprints). Slow-ish but standard, with published test vectors.
//! - [`flow_hash_v4`], [`flow_hash_v6`], [`client_hash`]: per-packet hashes.
//!   Each packed 64-bit word `w` is absorbed as
//!   `h = m(h ^ w)` with `m(x) = y ^ (y >> 32)`, `y = x * 0x9E37_79B9_7F4A_7C15`
//!   (wrapping), starting from a per-function seed, and the result is
//!   finished with MurmurHash3's `fmix64`. A few ns, full avalanche, no
//!   secret: these are not resistant to chosen inputs (a client picking its
//!   own ports can pick its backend, which it could do by retrying anyway).
//!   Tables that must resist hash flooding (conntrack) use keyed hashers.

use std::net::IpAddr;

/// SipHash-2-4 of `msg` under the 128-bit key `(k0, k1)`.
///
/// Matches the reference implementation with the key bytes read as two
/// little-endian words: key bytes `00..0f` are `k0 = 0x0706050403020100`,
/// `k1 = 0x0f0e0d0c0b0a0908`.
pub(crate) fn siphash24(k0: u64, k1: u64, msg: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let chunks = msg.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        compress(&mut v, u64::from_le_bytes(word));
    }
    // The last word carries the message length mod 256 in its top byte.
    let mut last = (msg.len() as u64 & 0xff) << 56;
    for (i, &b) in tail.iter().enumerate() {
        last |= u64::from(b) << (8 * i);
    }
    compress(&mut v, last);
    v[2] ^= 0xff;
    for _ in 0..4 {
        sipround(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// Absorbs one message word with the two compression rounds of SipHash-2-4.
fn compress(v: &mut [u64; 4], m: u64) {
    v[3] ^= m;
    sipround(v);
    sipround(v);
    v[0] ^= m;
}

fn sipround(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

/// First SipHash key word of every Maglev build-time hash: `"lbd:mglv"`.
const K0: u64 = u64::from_le_bytes(*b"lbd:mglv");
/// Second key word of the offset hash `h1`: `"offset:1"`.
const K1_OFFSET: u64 = u64::from_le_bytes(*b"offset:1");
/// Second key word of the skip hash `h2`: `"skip::v1"`.
const K1_SKIP: u64 = u64::from_le_bytes(*b"skip::v1");
/// Second key word of the ring fingerprint: `"fprint:1"`.
const K1_FINGERPRINT: u64 = u64::from_le_bytes(*b"fprint:1");

/// Longest canonical backend encoding: family, 16 address bytes, port.
pub(crate) const KEY_MAX: usize = 19;

/// The canonical byte encoding of a backend's identity, which is what the
/// permutation hashes read and what the build sorts by.
///
/// IPv4: `[4, a, b, c, d, port_hi, port_lo]` (7 bytes).
/// IPv6: `[6, 16 address bytes, port_hi, port_lo]` (19 bytes).
/// Addresses are taken as given: an IPv4-mapped IPv6 address is a different
/// backend from the IPv4 address. Zero padding up to [`KEY_MAX`] makes the
/// derived array order equal to the order of the encoded byte strings, so
/// IPv4 sorts before IPv6, then by address, then by port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct BackendKey {
    bytes: [u8; KEY_MAX],
    len: u8,
}

impl BackendKey {
    /// Encodes `(addr, port)`.
    pub(crate) fn new(addr: IpAddr, port: u16) -> Self {
        let mut bytes = [0u8; KEY_MAX];
        let len = match addr {
            IpAddr::V4(a) => {
                bytes[0] = 4;
                bytes[1..5].copy_from_slice(&a.octets());
                bytes[5..7].copy_from_slice(&port.to_be_bytes());
                7
            }
            IpAddr::V6(a) => {
                bytes[0] = 6;
                bytes[1..17].copy_from_slice(&a.octets());
                bytes[17..19].copy_from_slice(&port.to_be_bytes());
                19
            }
        };
        BackendKey { bytes, len }
    }

    /// The encoded bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// `h1`: SipHash-2-4 under key `("lbd:mglv", "offset:1")`.
    pub(crate) fn offset_hash(&self) -> u64 {
        siphash24(K0, K1_OFFSET, self.as_bytes())
    }

    /// `h2`: SipHash-2-4 under key `("lbd:mglv", "skip::v1")`.
    pub(crate) fn skip_hash(&self) -> u64 {
        siphash24(K0, K1_SKIP, self.as_bytes())
    }
}

/// SipHash-2-4 under key `("lbd:mglv", "fprint:1")`, for ring fingerprints.
pub(crate) fn fingerprint_hash(msg: &[u8]) -> u64 {
    siphash24(K0, K1_FINGERPRINT, msg)
}

/// Seed of [`flow_hash_v4`]: `u64::from_le_bytes(*b"lbd:flw4")`.
const SEED_FLOW_V4: u64 = u64::from_le_bytes(*b"lbd:flw4");
/// Seed of [`flow_hash_v6`]: `u64::from_le_bytes(*b"lbd:flw6")`.
const SEED_FLOW_V6: u64 = u64::from_le_bytes(*b"lbd:flw6");
/// Seed of [`client_hash`] for IPv4: `u64::from_le_bytes(*b"lbd:cli4")`.
const SEED_CLIENT_V4: u64 = u64::from_le_bytes(*b"lbd:cli4");
/// Seed of [`client_hash`] for IPv6: `u64::from_le_bytes(*b"lbd:cli6")`.
const SEED_CLIENT_V6: u64 = u64::from_le_bytes(*b"lbd:cli6");

/// One absorb step: xor the word in, then multiply and fold the high half
/// down, because a multiply only carries entropy upwards.
#[inline(always)]
fn absorb(h: u64, w: u64) -> u64 {
    let y = (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    y ^ (y >> 32)
}

/// MurmurHash3's 64-bit finaliser: a bijection with full avalanche, so the
/// high bits that [`slot_for_hash`](super::slot_for_hash) reads are as good
/// as the low ones.
#[inline(always)]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The 5-tuple hash of an IPv4 flow, as seen in the client-to-frontend
/// direction (it is not symmetric). Addresses are in network byte order as
/// on the wire; ports and protocol are host values.
///
/// Encoding: `w0 = src‖dst` (8 bytes, big-endian) and
/// `w1 = sport << 32 | dport << 16 | proto`, absorbed in that order from
/// the seed `SEED_FLOW_V4` (`u64::from_le_bytes(*b"lbd:flw4")`) and
/// finished with `fmix64` (see the module doc).
#[inline]
pub fn flow_hash_v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> u64 {
    let w0 = u64::from(u32::from_be_bytes(src)) << 32 | u64::from(u32::from_be_bytes(dst));
    let w1 = ports_word(sport, dport, proto);
    fmix64(absorb(absorb(SEED_FLOW_V4, w0), w1))
}

/// The 5-tuple hash of an IPv6 flow (client-to-frontend direction).
///
/// Encoding: the source address as two big-endian words (high, low), then
/// the destination likewise, then `sport << 32 | dport << 16 | proto`,
/// absorbed in that order from the seed `SEED_FLOW_V6`
/// (`u64::from_le_bytes(*b"lbd:flw6")`), finished with `fmix64`.
#[inline]
pub fn flow_hash_v6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, proto: u8) -> u64 {
    let s = u128::from_be_bytes(src);
    let d = u128::from_be_bytes(dst);
    let mut h = SEED_FLOW_V6;
    h = absorb(h, (s >> 64) as u64);
    h = absorb(h, s as u64);
    h = absorb(h, (d >> 64) as u64);
    h = absorb(h, d as u64);
    h = absorb(h, ports_word(sport, dport, proto));
    fmix64(h)
}

/// The hash of a client address alone, for client-IP session affinity: every
/// flow of one client maps to the same backend while the ring is unchanged.
///
/// Encoding: IPv4 absorbs the address as one big-endian word from the seed
/// `SEED_CLIENT_V4` (`u64::from_le_bytes(*b"lbd:cli4")`); IPv6 absorbs its
/// two big-endian halves (high, low) from `SEED_CLIENT_V6`
/// (`u64::from_le_bytes(*b"lbd:cli6")`); both finish with `fmix64`. An IPv4-mapped IPv6
/// address hashes as IPv6.
#[inline]
pub fn client_hash(addr: IpAddr) -> u64 {
    match addr {
        IpAddr::V4(a) => fmix64(absorb(SEED_CLIENT_V4, u64::from(u32::from(a)))),
        IpAddr::V6(a) => {
            let x = u128::from(a);
            fmix64(absorb(absorb(SEED_CLIENT_V6, (x >> 64) as u64), x as u64))
        }
    }
}

#[inline(always)]
fn ports_word(sport: u16, dport: u16, proto: u8) -> u64 {
    u64::from(sport) << 32 | u64::from(dport) << 16 | u64::from(proto)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const REF_K0: u64 = 0x0706_0504_0302_0100;
    const REF_K1: u64 = 0x0f0e_0d0c_0b0a_0908;

    /// Vectors from the SipHash reference implementation (`vectors.h`):
    /// key `00..0f`, message `00..(n-1)` for n = 0, 1, 7, 8, 15.
    #[test]
    fn siphash_reference_vectors() {
        let msg: Vec<u8> = (0u8..64).collect();
        let expect: [(usize, u64); 5] = [
            (0, 0x726f_db47_dd0e_0e31),
            (1, 0x74f8_39c5_93dc_67fd),
            (7, 0xab02_00f5_8b01_d137),
            (8, 0x93f5_f579_9a93_2462),
            (15, 0xa129_ca61_49be_45e5),
        ];
        for (n, want) in expect {
            assert_eq!(siphash24(REF_K0, REF_K1, &msg[..n]), want, "length {n}");
        }
    }

    proptest! {
        /// `std`'s deprecated `SipHasher` is SipHash-2-4 over the raw bytes
        /// written: an independent implementation to check against.
        #[test]
        fn siphash_matches_std(k0: u64, k1: u64, msg in proptest::collection::vec(any::<u8>(), 0..80)) {
            #[allow(deprecated)]
            let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
            std::hash::Hasher::write(&mut h, &msg);
            prop_assert_eq!(siphash24(k0, k1, &msg), std::hash::Hasher::finish(&h));
        }
    }

    #[test]
    fn backend_key_encoding() {
        let v4 = BackendKey::new("10.0.0.1".parse().unwrap(), 0x1f90);
        assert_eq!(v4.as_bytes(), &[4, 10, 0, 0, 1, 0x1f, 0x90]);
        let v6 = BackendKey::new("2001:db8::1".parse().unwrap(), 443);
        let mut want = vec![6, 0x20, 0x01, 0x0d, 0xb8];
        want.extend_from_slice(&[0; 11]);
        want.extend_from_slice(&[1, 0x01, 0xbb]);
        assert_eq!(v6.as_bytes(), &want[..]);
        assert!(v4 < v6, "IPv4 sorts before IPv6");
        let p1 = BackendKey::new("10.0.0.1".parse().unwrap(), 1);
        let p2 = BackendKey::new("10.0.0.1".parse().unwrap(), 2);
        let a2 = BackendKey::new("10.0.0.2".parse().unwrap(), 1);
        assert!(p1 < p2 && p2 < a2, "address first, then port");
    }

    #[test]
    fn flow_hashes_see_every_field() {
        let base = flow_hash_v4([10, 0, 0, 1], [192, 0, 2, 1], 1234, 80, 6);
        assert_ne!(base, flow_hash_v4([10, 0, 0, 2], [192, 0, 2, 1], 1234, 80, 6));
        assert_ne!(base, flow_hash_v4([10, 0, 0, 1], [192, 0, 2, 2], 1234, 80, 6));
        assert_ne!(base, flow_hash_v4([10, 0, 0, 1], [192, 0, 2, 1], 1235, 80, 6));
        assert_ne!(base, flow_hash_v4([10, 0, 0, 1], [192, 0, 2, 1], 1234, 81, 6));
        assert_ne!(base, flow_hash_v4([10, 0, 0, 1], [192, 0, 2, 1], 1234, 80, 17));
        // Swapping directions gives a different hash: not symmetric.
        assert_ne!(base, flow_hash_v4([192, 0, 2, 1], [10, 0, 0, 1], 80, 1234, 6));
        let mut s = [0u8; 16];
        let d = [0xffu8; 16];
        let b6 = flow_hash_v6(s, d, 1, 2, 17);
        for i in 0..16 {
            s[i] = 1;
            assert_ne!(b6, flow_hash_v6(s, d, 1, 2, 17), "src byte {i}");
            s[i] = 0;
        }
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_ne!(client_hash(v4), client_hash(mapped));
    }

    /// Flipping one input bit flips about half of the output bits, in the
    /// high half too (which is what the slot reduction reads).
    #[test]
    fn flow_hash_v4_avalanche() {
        let (src, dst, sp, dp, pr) = ([10, 1, 2, 3], [192, 0, 2, 7], 40000u16, 443u16, 6u8);
        let base = flow_hash_v4(src, dst, sp, dp, pr);
        let mut total = 0u32;
        let mut trials = 0u32;
        for bit in 0..16 {
            let flipped = flow_hash_v4(src, dst, sp ^ (1 << bit), dp, pr);
            let diff = base ^ flipped;
            total += diff.count_ones();
            trials += 1;
            assert!((16..=48).contains(&diff.count_ones()), "sport bit {bit}");
            assert!(
                (4..=28).contains(&(diff >> 32).count_ones()),
                "sport bit {bit}, high half"
            );
        }
        for byte in 0..4 {
            for bit in 0..8 {
                let mut s = src;
                s[byte] ^= 1 << bit;
                let diff = base ^ flow_hash_v4(s, dst, sp, dp, pr);
                total += diff.count_ones();
                trials += 1;
                assert!(
                    (16..=48).contains(&diff.count_ones()),
                    "src byte {byte} bit {bit}"
                );
            }
        }
        let mean = f64::from(total) / f64::from(trials);
        assert!((28.0..=36.0).contains(&mean), "mean flipped bits {mean}");
    }
}
