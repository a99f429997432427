//! [`SnatPorts`]: one worker's share of SNAT ports, per address and per
//! port space (TCP, UDP, ICMP echo ids).
//!
//! Invariants: it only ever hands out ports with `port & mask == worker`
//! ([`super::owner_of_snat_port`] reads the owner back), never a port that
//! is in use, and it never allocates after construction. Each pool is a
//! FIFO ring, so a freed port is reused as late as possible.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;

use super::{snat_port_mask, Proto, WorkerId};
use crate::prefetch::Prefetch;

/// Why [`SnatPorts::new`] refused a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnatNewError {
    /// The worker index is not below the number of workers.
    #[error("worker {worker} out of range for {n_workers} workers")]
    WorkerOutOfRange {
        /// The worker index given.
        worker: u16,
        /// The number of workers given.
        n_workers: u16,
    },
    /// The port range holds no port owned by this worker.
    #[error("port range {start}..={end} holds no port for worker {worker}")]
    NoPorts {
        /// First port of the range.
        start: u16,
        /// Last port of the range.
        end: u16,
        /// The worker index.
        worker: u16,
    },
    /// More than [`SnatPorts::MAX_ADDRESSES`] addresses, or a duplicate.
    #[error("too many or duplicate SNAT addresses")]
    BadAddresses,
}

/// Why [`SnatPorts::free`] refused a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SnatFreeError {
    /// The address is not one of this worker's SNAT addresses.
    #[error("address is not a SNAT address of this worker")]
    UnknownAddress,
    /// The port is not in use (double free, or never handed out here).
    #[error("port is not in use")]
    NotInUse,
}

/// The three port spaces per address: TCP, UDP, ICMP/ICMPv6 echo ids.
const SPACES: usize = 3;

#[inline]
const fn space_of(proto: Proto) -> usize {
    match proto {
        Proto::Tcp => 0,
        Proto::Udp => 1,
        Proto::Icmp | Proto::Icmpv6 => 2,
    }
}

/// Slots of [`SnatPorts`]' IPv4 and IPv6 address maps: a power of two, four times
/// [`SnatPorts::MAX_ADDRESSES`].
const V4_SLOTS: usize = 256;
/// An empty slot of that map (no address index reaches it).
const NO_ADDR: u8 = u8::MAX;
const _: () =
    assert!(4 * SnatPorts::MAX_ADDRESSES <= V4_SLOTS && SnatPorts::MAX_ADDRESSES < NO_ADDR as usize);

/// Home slot of an address (IPv4, or folded to 32 bits) in a map of 256
/// slots: this one, and the conntrack's reply-cell map. Fibonacci
/// hashing: the top bits of a multiply, so addresses differing in any
/// byte spread.
#[inline(always)]
pub(crate) fn v4_home(a: u32) -> usize {
    (a.wrapping_mul(0x9E37_79B9) >> 24) as usize
}

/// The home slot of an IPv6 address (as a `u128`) in `SnatPorts::v6_index`:
/// [`v4_home`] of the address folded to 32 bits.
#[inline(always)]
fn v6_home(w: u128) -> usize {
    let x = (w as u64) ^ (w >> 64) as u64;
    v4_home((x as u32) ^ (x >> 32) as u32)
}

/// An open-addressed map of [`V4_SLOTS`] `(address, index in addrs)`
/// pairs of one family, linear probing from the address's home slot
/// ([`v4_home`], [`v6_home`]), [`NO_ADDR`] marking an empty slot. At most
/// a quarter full (`MAX_ADDRESSES`), so a lookup is one or two probes and
/// always meets an empty slot.
#[derive(Debug, Clone)]
struct AddrIndex<K>(Box<[(K, u8)]>);

impl<K: Copy + Eq + Default> AddrIndex<K> {
    /// The map of `entries` (address, index in `addrs`), each homed by
    /// `home`.
    fn new(entries: impl Iterator<Item = (K, u8)>, home: impl Fn(K) -> usize) -> Self {
        let mut slots = vec![(K::default(), NO_ADDR); V4_SLOTS].into_boxed_slice();
        for (a, i) in entries {
            let mut h = home(a);
            while slots[h].1 != NO_ADDR {
                h = (h + 1) % V4_SLOTS;
            }
            slots[h] = (a, i);
        }
        AddrIndex(slots)
    }

    /// The index in `addrs` of `a`, whose home slot is `h`.
    #[inline(always)]
    fn position(&self, a: K, mut h: usize) -> Option<usize> {
        loop {
            let (k, i) = self.0[h];
            if i == NO_ADDR {
                return None;
            }
            if k == a {
                return Some(usize::from(i));
            }
            h = (h + 1) % V4_SLOTS;
        }
    }
}

/// A fixed-capacity FIFO of free ports with an in-use bitmap. Its
/// `Debug` shows what the two mean, not their memory: the free ports in
/// the order they will be handed out and the ports in use (the bitmap is
/// 1,024 words, nearly all 0).
#[derive(Clone)]
struct PortPool {
    /// Ring buffer of free ports; its length never changes after construction.
    ring: Box<[u16]>,
    head: usize,
    len: usize,
    /// One bit per port number (8 KiB): set while the port is handed out.
    in_use: Box<[u64]>,
}

impl core::fmt::Debug for PortPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let free: Vec<u16> = (0..self.len)
            .map(|i| self.ring[(self.head + i) % self.ring.len()])
            .collect();
        let mut in_use = Vec::new();
        for (w, word) in self.in_use.iter().enumerate() {
            let mut bits = *word;
            while bits != 0 {
                in_use.push((w * 64) as u16 + bits.trailing_zeros() as u16);
                bits &= bits - 1;
            }
        }
        f.debug_struct("PortPool")
            .field("capacity", &self.ring.len())
            .field("free", &free)
            .field("in_use", &in_use)
            .finish()
    }
}

impl PortPool {
    fn new(ports: &[u16]) -> Self {
        PortPool {
            ring: ports.into(),
            head: 0,
            len: ports.len(),
            in_use: vec![0u64; 65536 / 64].into_boxed_slice(),
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<u16> {
        if self.len == 0 {
            return None;
        }
        let port = self.ring[self.head];
        self.head += 1;
        if self.head == self.ring.len() {
            self.head = 0;
        }
        self.len -= 1;
        self.in_use[port as usize / 64] |= 1 << (port % 64);
        Some(port)
    }

    #[inline]
    fn push(&mut self, port: u16) -> Result<(), SnatFreeError> {
        let (word, bit) = (port as usize / 64, 1u64 << (port % 64));
        if self.in_use[word] & bit == 0 {
            return Err(SnatFreeError::NotInUse);
        }
        self.in_use[word] &= !bit;
        // Only ports popped earlier are in use, so the ring has room.
        let mut tail = self.head + self.len;
        if tail >= self.ring.len() {
            tail -= self.ring.len();
        }
        self.ring[tail] = port;
        self.len += 1;
        Ok(())
    }
}

/// Where a run of [`SnatPorts::warm_alloc_v4`] guesses stands
/// ([`SnatPorts::alloc_guess`] starts one), or of
/// [`SnatPorts::warm_alloc_v6`] guesses ([`SnatPorts::alloc_guess_v6`]).
#[derive(Debug, Clone, Copy)]
pub struct AllocGuess {
    /// The position in its family's round-robin of the next guess.
    pos: usize,
    /// Guesses made, modulo the number of its family's addresses.
    lap: usize,
    /// How many ports on from its pool's head the next guess takes: the
    /// completed rounds of the round-robin.
    ahead: usize,
}

/// One worker's share of SNAT (address, port) pairs for full-NAT.
///
/// Every port handed out satisfies `port & mask == worker`, so
/// [`owner_of_snat_port`](super::owner_of_snat_port) finds this worker from a reply's destination port.
///
/// Uniqueness is per (SNAT address, protocol), the simpler of the two
/// choices: a port in use towards one backend is not handed out towards
/// another. This wastes some of the 5-tuple space (per-backend uniqueness
/// would multiply it by the number of backends) but needs no per-backend
/// state and makes `free` O(1). ICMP and ICMPv6 echo identifiers share the
/// third space. Free ports are reused in FIFO order, so a freed port waits
/// as long as possible before reuse, which keeps a backend's TIME_WAIT
/// socket for the old 4-tuple from meeting the new connection.
///
/// Everything is allocated in [`SnatPorts::new`]; `alloc` and `free` are
/// O(1) (alloc may skip exhausted addresses) and never allocate.
#[derive(Debug, Clone)]
pub struct SnatPorts {
    worker: WorkerId,
    mask: u16,
    addrs: Box<[IpAddr]>,
    /// The IPv4 entries of `addrs` by value, for `free`, which runs on
    /// every expiry and eviction of a full-NAT flow (a scan of 32
    /// addresses was ~100 instructions).
    v4_index: AddrIndex<u32>,
    /// The same for the IPv6 addresses, homed by the address folded to
    /// 32 bits ([`v6_home`]), for [`SnatPorts::free`] and
    /// [`SnatPorts::warm_free_v6`] of IPv6 pairs: a scan of `v6_order`
    /// stopped at a random place, a mispredicted loop exit a free (over
    /// one a SYN in an IPv6 SYN flood into a full table: the eviction's
    /// free and its warming; callgrind's branch simulation).
    v6_index: AddrIndex<u128>,
    /// The IPv4 entries of `addrs` in order, with their index in `addrs`:
    /// the round-robin of [`SnatPorts::alloc_v4`], which runs on every new
    /// full-NAT flow (going through `addrs` and skipping the other family
    /// cost ~120 instructions an allocation).
    v4_order: Box<[(Ipv4Addr, u8)]>,
    /// The IPv6 entries of `addrs` in order, with their index in `addrs`:
    /// the round-robin of [`SnatPorts::alloc_v6`] (as `v4_order`: going
    /// through `addrs` cost ~50 instructions more an allocation).
    v6_order: Box<[(Ipv6Addr, u8)]>,
    /// `pools[addr * SPACES + space]`.
    pools: Box<[PortPool]>,
    /// Round-robin start for the next allocation: a position in
    /// `v4_order` and in `v6_order` (below its length when it is not
    /// empty).
    next_v4: usize,
    next_v6: usize,
    /// The range the pools' ports come from (this worker's share of it).
    port_range: RangeInclusive<u16>,
}

impl SnatPorts {
    /// At most this many SNAT addresses per worker (bounds the per-alloc scan).
    pub const MAX_ADDRESSES: usize = 64;

    /// The default SNAT port range: everything above the well-known ports.
    pub const DEFAULT_PORT_RANGE: RangeInclusive<u16> = 1024..=65535;

    /// Builds the pool of `worker` out of `n_workers`: every port in
    /// `port_range` with `port & mask == worker`, on every address.
    pub fn new(
        worker: WorkerId,
        n_workers: u16,
        addresses: &[IpAddr],
        port_range: RangeInclusive<u16>,
    ) -> Result<SnatPorts, SnatNewError> {
        if worker.0 >= n_workers {
            return Err(SnatNewError::WorkerOutOfRange {
                worker: worker.0,
                n_workers,
            });
        }
        if addresses.len() > Self::MAX_ADDRESSES
            || addresses
                .iter()
                .enumerate()
                .any(|(i, a)| addresses[..i].contains(a))
        {
            return Err(SnatNewError::BadAddresses);
        }
        let mask = snat_port_mask(n_workers);
        let ports: Vec<u16> = port_range.clone().filter(|p| p & mask == worker.0).collect();
        if ports.is_empty() {
            return Err(SnatNewError::NoPorts {
                start: *port_range.start(),
                end: *port_range.end(),
                worker: worker.0,
            });
        }
        let pools = (0..addresses.len() * SPACES)
            .map(|_| PortPool::new(&ports))
            .collect();
        // MAX_ADDRESSES keeps the index within a u8, below NO_ADDR.
        let v4_index = AddrIndex::new(
            addresses.iter().enumerate().filter_map(|(i, a)| match a {
                IpAddr::V4(a) => Some((u32::from(*a), i as u8)),
                IpAddr::V6(_) => None,
            }),
            v4_home,
        );
        let v6_index = AddrIndex::new(
            addresses.iter().enumerate().filter_map(|(i, a)| match a {
                IpAddr::V4(_) => None,
                IpAddr::V6(a) => Some((u128::from(*a), i as u8)),
            }),
            v6_home,
        );
        let v4_order = addresses
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match a {
                // MAX_ADDRESSES keeps the index within a u8.
                IpAddr::V4(a) => Some((*a, i as u8)),
                IpAddr::V6(_) => None,
            })
            .collect();
        let v6_order = addresses
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match a {
                IpAddr::V4(_) => None,
                IpAddr::V6(a) => Some((*a, i as u8)),
            })
            .collect();
        Ok(SnatPorts {
            worker,
            mask,
            addrs: addresses.into(),
            v4_index,
            v6_index,
            v4_order,
            v6_order,
            pools,
            next_v4: 0,
            next_v6: 0,
            port_range,
        })
    }

    /// The port range the pool was built from; its ports are this
    /// worker's share of it.
    pub fn port_range(&self) -> RangeInclusive<u16> {
        self.port_range.clone()
    }

    /// The worker this pool belongs to.
    #[inline]
    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    /// The SNAT addresses, both families, in the order given.
    pub fn addresses(&self) -> &[IpAddr] {
        &self.addrs
    }

    /// The mask of [`owner_of_snat_port`](super::owner_of_snat_port): every port handed out has
    /// `port & mask == worker`.
    pub fn port_mask(&self) -> u16 {
        self.mask
    }

    /// Hands out a free (SNAT address, port) of the backend's address family
    /// for a flow to `backend`, or `None` when every address is exhausted
    /// (the caller counts `SnatExhausted`). Addresses are used round-robin.
    pub fn alloc(&mut self, backend: (IpAddr, u16), proto: Proto) -> Option<(IpAddr, u16)> {
        if backend.0.is_ipv4() {
            return self.alloc_v4(proto).map(|(a, port)| (IpAddr::V4(a), port));
        }
        self.alloc_v6(proto).map(|(a, port)| (IpAddr::V6(a), port))
    }

    /// [`SnatPorts::alloc`] toward an IPv6 backend: a free pair on one of
    /// the IPv6 addresses, round-robin, or `None` when all are exhausted
    /// (nothing changed).
    #[inline]
    pub fn alloc_v6(&mut self, proto: Proto) -> Option<(Ipv6Addr, u16)> {
        let n = self.v6_order.len();
        let space = space_of(proto);
        let mut j = self.next_v6;
        for _ in 0..n {
            let (addr, i) = self.v6_order[j];
            j = if j + 1 == n { 0 } else { j + 1 };
            if let Some(port) = self.pools[usize::from(i) * SPACES + space].pop() {
                self.next_v6 = j;
                debug_assert_eq!(port & self.mask, self.worker.0);
                return Some((addr, port));
            }
        }
        None
    }

    /// [`SnatPorts::alloc`] toward an IPv4 backend: a free pair on one of
    /// the IPv4 addresses, round-robin, or `None` when all are exhausted.
    #[inline(always)]
    pub fn alloc_v4(&mut self, proto: Proto) -> Option<(Ipv4Addr, u16)> {
        let n = self.v4_order.len();
        let space = space_of(proto);
        let mut j = self.next_v4;
        for _ in 0..n {
            let (addr, i) = self.v4_order[j];
            j = if j + 1 == n { 0 } else { j + 1 };
            if let Some(port) = self.pools[usize::from(i) * SPACES + space].pop() {
                self.next_v4 = j;
                debug_assert_eq!(port & self.mask, self.worker.0);
                return Some((addr, port));
            }
        }
        None
    }

    /// The start of a run of [`SnatPorts::warm_alloc_v4`] guesses: at the
    /// next allocation.
    #[inline]
    pub fn alloc_guess(&self) -> AllocGuess {
        AllocGuess {
            pos: self.next_v4,
            lap: 0,
            ahead: 0,
        }
    }

    /// A guess at the IPv4 pair the next [`SnatPorts::alloc_v4`] after
    /// those `g` already guessed will hand out, if no port is freed
    /// meanwhile and no address runs dry, with the in-use word that
    /// allocation will set warmed by `p`; `g` moves on to the allocation
    /// after it. For warming only (a wrong guess costs a wasted prefetch,
    /// never a wrong answer). `None` (and `g` unmoved) past the ports left.
    ///
    /// The `k`-th guess of a run is the `k mod n`-th address on from the
    /// round-robin's start (`n` IPv4 addresses) and the `k / n`-th port on
    /// from its pool's head; `g` keeps both as counters, so a guess costs
    /// no division (three of them were ~20 cycles a new flow).
    #[inline]
    pub fn warm_alloc_v4(
        &self,
        p: &impl Prefetch,
        g: &mut AllocGuess,
        proto: Proto,
    ) -> Option<(Ipv4Addr, u16)> {
        self.warm_alloc_in(&self.v4_order, p, g, proto)
    }

    /// The start of a run of [`SnatPorts::warm_alloc_v6`] guesses: at the
    /// next IPv6 allocation.
    #[inline]
    pub fn alloc_guess_v6(&self) -> AllocGuess {
        AllocGuess {
            pos: self.next_v6,
            lap: 0,
            ahead: 0,
        }
    }

    /// [`SnatPorts::warm_alloc_v4`] for [`SnatPorts::alloc_v6`]: a guess
    /// at the IPv6 pair the next allocation after those `g` (from
    /// [`SnatPorts::alloc_guess_v6`]) already guessed will hand out, with
    /// the in-use word it will set warmed. For warming only.
    #[inline]
    pub fn warm_alloc_v6(
        &self,
        p: &impl Prefetch,
        g: &mut AllocGuess,
        proto: Proto,
    ) -> Option<(Ipv6Addr, u16)> {
        self.warm_alloc_in(&self.v6_order, p, g, proto)
    }

    /// A guess of [`SnatPorts::warm_alloc_v4`] in the round-robin `order`.
    #[inline(always)]
    fn warm_alloc_in<A: Copy>(
        &self,
        order: &[(A, u8)],
        p: &impl Prefetch,
        g: &mut AllocGuess,
        proto: Proto,
    ) -> Option<(A, u16)> {
        let n = order.len();
        let &(a, i) = order.get(g.pos)?;
        let pool = &self.pools[usize::from(i) * SPACES + space_of(proto)];
        if g.ahead >= pool.len {
            return None;
        }
        // `head < ring.len()` and `ahead < len <= ring.len()`.
        let mut at = pool.head + g.ahead;
        if at >= pool.ring.len() {
            at -= pool.ring.len();
        }
        let port = pool.ring[at];
        p.prefetch(&pool.in_use[usize::from(port) / 64]);
        g.pos = if g.pos + 1 == n { 0 } else { g.pos + 1 };
        g.lap += 1;
        if g.lap == n {
            g.lap = 0;
            g.ahead += 1;
        }
        Some((a, port))
    }

    /// Returns a pair handed out by [`SnatPorts::alloc`] to the pool.
    pub fn free(&mut self, snat: (IpAddr, u16), proto: Proto) -> Result<(), SnatFreeError> {
        let i = match snat.0 {
            IpAddr::V4(a) => return self.free_v4(a, snat.1, proto),
            IpAddr::V6(a) => self.v6_position(&a),
        }
        .ok_or(SnatFreeError::UnknownAddress)?;
        self.pools[i * SPACES + space_of(proto)].push(snat.1)
    }

    /// [`SnatPorts::free`] of an IPv4 pair.
    #[inline]
    pub fn free_v4(&mut self, addr: Ipv4Addr, port: u16, proto: Proto) -> Result<(), SnatFreeError> {
        let i = self
            .v4_position(u32::from(addr))
            .ok_or(SnatFreeError::UnknownAddress)?;
        self.pools[i * SPACES + space_of(proto)].push(port)
    }

    /// Warms (with `p`) the in-use word a [`SnatPorts::free_v4`] of this
    /// pair will read and clear, and the slot of the free ring it will
    /// write the port to (if no other port of that pool is freed first);
    /// nothing for an unknown address. Reads only.
    #[inline]
    pub fn warm_free_v4(&self, p: &impl Prefetch, addr: Ipv4Addr, port: u16, proto: Proto) {
        if let Some(i) = self.v4_position(u32::from(addr)) {
            self.warm_free_at(p, i, port, proto);
        }
    }

    /// What freeing `port` of `proto` on the `i`-th address will touch.
    #[inline(always)]
    fn warm_free_at(&self, p: &impl Prefetch, i: usize, port: u16, proto: Proto) {
        let pool = &self.pools[i * SPACES + space_of(proto)];
        p.prefetch(&pool.in_use[usize::from(port) / 64]);
        let mut tail = pool.head + pool.len;
        if tail >= pool.ring.len() {
            tail -= pool.ring.len();
        }
        if let Some(slot) = pool.ring.get(tail) {
            p.prefetch(slot);
        }
    }

    /// [`SnatPorts::warm_free_v4`] of an IPv6 pair: what a
    /// [`SnatPorts::free`] of it will touch. Reads only.
    #[inline]
    pub fn warm_free_v6(&self, p: &impl Prefetch, addr: Ipv6Addr, port: u16, proto: Proto) {
        if let Some(i) = self.v6_position(&addr) {
            self.warm_free_at(p, i, port, proto);
        }
    }

    /// The index in `addrs` of the IPv4 address `a`.
    #[inline]
    fn v4_position(&self, a: u32) -> Option<usize> {
        self.v4_index.position(a, v4_home(a))
    }

    /// The index in `addrs` of the IPv6 address `a`.
    #[inline]
    fn v6_position(&self, a: &Ipv6Addr) -> Option<usize> {
        let w = u128::from(*a);
        self.v6_index.position(w, v6_home(w))
    }

    /// Free ports left on `addr` for `proto`; 0 for an unknown address.
    pub fn available(&self, addr: IpAddr, proto: Proto) -> usize {
        self.addrs
            .iter()
            .position(|a| *a == addr)
            .map_or(0, |i| self.pools[i * SPACES + space_of(proto)].len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::owner_of_snat_port;
    use crate::prefetch::Recorder;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn port_pool_debug_shows_free_ports_in_order_and_ports_in_use() {
        let mut pool = PortPool::new(&[100, 200, 300]);
        assert_eq!(
            format!("{pool:?}"),
            "PortPool { capacity: 3, free: [100, 200, 300], in_use: [] }"
        );
        assert_eq!((pool.pop(), pool.pop()), (Some(100), Some(200)));
        pool.push(100).unwrap();
        // The ring has wrapped: 300 is handed out next, then 100.
        assert_eq!(
            format!("{pool:?}"),
            "PortPool { capacity: 3, free: [300, 100], in_use: [200] }"
        );
        assert_eq!(pool.pop(), Some(300));
        assert_eq!(
            format!("{pool:?}"),
            "PortPool { capacity: 3, free: [100], in_use: [200, 300] }"
        );
    }

    #[test]
    fn snat_alloc_honours_mask_ownership() {
        for n in [1u16, 2, 3, 4, 6, 8] {
            for w in 0..n {
                let mut p = SnatPorts::new(WorkerId(w), n, &[v4(198, 51, 100, 1)], 1024..=65535).unwrap();
                for _ in 0..100 {
                    let (_, port) = p.alloc((v4(10, 0, 0, 9), 80), Proto::Tcp).unwrap();
                    assert_eq!(owner_of_snat_port(port, n), WorkerId(w));
                    assert!(port >= 1024);
                }
            }
        }
    }

    #[test]
    fn snat_exhaustion_no_reuse_then_fifo_reuse() {
        let addr = v4(198, 51, 100, 1);
        // 4 workers, range 1024..=1039 -> worker 1 owns 1025, 1029, 1033, 1037.
        let mut p = SnatPorts::new(WorkerId(1), 4, &[addr], 1024..=1039).unwrap();
        let be = (v4(10, 0, 0, 9), 80);
        let got: Vec<u16> = (0..4).map(|_| p.alloc(be, Proto::Tcp).unwrap().1).collect();
        assert_eq!(got, [1025, 1029, 1033, 1037]);
        assert_eq!(p.alloc(be, Proto::Tcp), None, "exhausted");
        // Separate space per protocol.
        assert_eq!(p.alloc(be, Proto::Udp), Some((addr, 1025)));
        assert_eq!(p.available(addr, Proto::Udp), 3);
        // Free then reuse; a double free and a foreign address are refused.
        p.free((addr, 1033), Proto::Tcp).unwrap();
        assert_eq!(p.free((addr, 1033), Proto::Tcp), Err(SnatFreeError::NotInUse));
        assert_eq!(
            p.free((v4(1, 2, 3, 4), 1033), Proto::Tcp),
            Err(SnatFreeError::UnknownAddress)
        );
        p.free((addr, 1025), Proto::Tcp).unwrap();
        // FIFO: the port freed first comes back first.
        assert_eq!(p.alloc(be, Proto::Tcp), Some((addr, 1033)));
        assert_eq!(p.alloc(be, Proto::Tcp), Some((addr, 1025)));
        assert_eq!(p.alloc(be, Proto::Tcp), None);
    }

    #[test]
    fn snat_free_finds_each_address_of_mixed_families() {
        // IPv6 entries between IPv4 ones: the IPv4 and IPv6 indexes must
        // map each address to its own pool.
        let addrs: [IpAddr; 4] = [
            "2001:db8::1".parse().unwrap(),
            v4(198, 51, 100, 1),
            "2001:db8::2".parse().unwrap(),
            v4(198, 51, 100, 2),
        ];
        let mut p = SnatPorts::new(WorkerId(0), 1, &addrs, 1024..=1031).unwrap();
        let mut held = Vec::new();
        for be in [(v4(10, 0, 0, 9), 80), ("2001:db8:1::9".parse().unwrap(), 80)] {
            for _ in 0..16 {
                held.push(p.alloc(be, Proto::Tcp).unwrap());
            }
            assert_eq!(p.alloc(be, Proto::Tcp), None);
        }
        for a in addrs {
            assert_eq!(p.available(a, Proto::Tcp), 0);
        }
        for (i, &pair) in held.iter().enumerate() {
            p.free(pair, Proto::Tcp).unwrap();
            assert_eq!(p.free(pair, Proto::Tcp), Err(SnatFreeError::NotInUse), "{i}");
        }
        for a in addrs {
            assert_eq!(p.available(a, Proto::Tcp), 8, "{a}");
        }
        assert_eq!(
            p.free(("2001:db8::3".parse().unwrap(), 1024), Proto::Tcp),
            Err(SnatFreeError::UnknownAddress)
        );
    }

    #[test]
    fn snat_ipv6_index_finds_every_address() {
        // The most addresses, IPv6 after 16 IPv4 ones, in pairs that fold
        // to the same 32 bits (one home slot, one probe run): each is
        // found at its own index; others folding alike too are not.
        let base = 0x2001_0db8_0000_0000_0000_0000_0000_0000u128;
        // Address i with both halves XORed by j: it folds as address i.
        let twin = |i: u128, j: u128| Ipv6Addr::from((base + i) ^ (j << 64 | j));
        let mut addrs: Vec<IpAddr> = (0..16).map(|i| v4(198, 51, 100, i)).collect();
        for i in 0..24u128 {
            addrs.push(IpAddr::V6(twin(i, 0)));
            addrs.push(IpAddr::V6(twin(i, 1000 + i)));
        }
        assert_eq!(addrs.len(), SnatPorts::MAX_ADDRESSES);
        let p = SnatPorts::new(WorkerId(0), 1, &addrs, 1024..=1031).unwrap();
        for (i, a) in addrs.iter().enumerate() {
            if let IpAddr::V6(a) = a {
                assert_eq!(p.v6_position(a), Some(i), "{a}");
            }
        }
        for i in 0..24u128 {
            let absent = twin(i, 5000);
            assert_eq!(v6_home(u128::from(absent)), v6_home(u128::from(twin(i, 0))));
            assert_eq!(p.v6_position(&absent), None, "{absent}");
        }
        assert_eq!(p.v6_position(&"2001:db8::ffff".parse().unwrap()), None);
    }

    #[test]
    fn snat_peek_guesses_the_next_allocations() {
        // Without frees, the guesses are exactly what alloc hands out next,
        // across the round-robin, until every pool is empty.
        let addrs = [v4(198, 51, 100, 1), v4(198, 51, 100, 2), v4(198, 51, 100, 3)];
        // Worker 1 of 2: 8 odd ports on each address.
        let mut p = SnatPorts::new(WorkerId(1), 2, &addrs, 1024..=1039).unwrap();
        let be = (v4(10, 9, 0, 1), 80);
        let as_v4 = |x: Option<(IpAddr, u16)>| {
            x.map(|(a, port)| match a {
                IpAddr::V4(a) => (a, port),
                IpAddr::V6(_) => unreachable!(),
            })
        };
        // The in-use word an allocation of `pair` set.
        let word_of = |p: &SnatPorts, (a, port): (Ipv4Addr, u16)| {
            let i = addrs.iter().position(|x| *x == IpAddr::V4(a)).unwrap();
            &p.pools[i * SPACES + space_of(Proto::Tcp)].in_use[usize::from(port) / 64] as *const u64 as usize
        };
        for _ in 0..6 {
            let rec = Recorder::default();
            let mut g = p.alloc_guess();
            let guesses: Vec<_> = (0..4)
                .map(|_| p.warm_alloc_v4(&rec, &mut g, Proto::Tcp))
                .collect();
            for (n, g) in guesses.into_iter().enumerate() {
                assert!(g.is_some(), "guess {n}");
                let got = as_v4(p.alloc(be, Proto::Tcp));
                assert_eq!(g, got, "guess {n}");
                // Each guess warmed the word its allocation set.
                assert_eq!(rec.0.borrow()[n], word_of(&p, got.unwrap()), "guess {n}");
            }
        }
        assert_eq!(
            p.warm_alloc_v4(&Recorder::default(), &mut p.alloc_guess(), Proto::Tcp),
            None
        );
        assert_eq!(p.alloc(be, Proto::Tcp), None);
    }

    #[test]
    fn snat_peek_guesses_the_next_ipv6_allocations() {
        // As for IPv4, in the IPv6 round-robin (an IPv4 address among the
        // IPv6 ones is not in it), from wherever the last IPv6 allocation
        // left it; the frees the guesses warm are those of the pairs taken.
        let six = |i: u16| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i));
        let addrs = [six(1), v4(198, 51, 100, 1), six(2), six(3)];
        let mut p = SnatPorts::new(WorkerId(1), 2, &addrs, 1024..=1039).unwrap();
        let word_of = |p: &SnatPorts, (a, port): (Ipv6Addr, u16), proto: Proto| {
            let i = addrs.iter().position(|x| *x == IpAddr::V6(a)).unwrap();
            &p.pools[i * SPACES + space_of(proto)].in_use[usize::from(port) / 64] as *const u64 as usize
        };
        // An IPv4 allocation moves nothing of the IPv6 round-robin.
        assert_eq!(
            p.alloc_v4(Proto::Tcp),
            Some((Ipv4Addr::new(198, 51, 100, 1), 1025))
        );
        let mut held = Vec::new();
        for round in 0..6 {
            let rec = Recorder::default();
            let mut g = p.alloc_guess_v6();
            let guesses: Vec<_> = (0..4)
                .map(|_| p.warm_alloc_v6(&rec, &mut g, Proto::Udp))
                .collect();
            for (n, g) in guesses.into_iter().enumerate() {
                assert!(g.is_some(), "round {round} guess {n}");
                let got = p.alloc_v6(Proto::Udp);
                assert_eq!(g, got, "round {round} guess {n}");
                assert_eq!(rec.0.borrow()[n], word_of(&p, got.unwrap(), Proto::Udp));
                held.push(got.unwrap());
            }
        }
        // Past the ports left: no guess.
        let mut g = p.alloc_guess_v6();
        assert!(p
            .warm_alloc_v6(&Recorder::default(), &mut g, Proto::Udp)
            .is_none());
        assert_eq!(p.alloc_v6(Proto::Udp), None);
        // Freeing: the in-use word it clears and the ring slot it writes.
        for &(a, port) in held.iter().rev() {
            let rec = Recorder::default();
            p.warm_free_v6(&rec, a, port, Proto::Udp);
            let i = addrs.iter().position(|x| *x == IpAddr::V6(a)).unwrap();
            let pool = &p.pools[i * SPACES + space_of(Proto::Udp)];
            let tail = (pool.head + pool.len) % pool.ring.len();
            let slot = &pool.ring[tail] as *const u16 as usize;
            assert_eq!(*rec.0.borrow(), [word_of(&p, (a, port), Proto::Udp), slot]);
            p.free((IpAddr::V6(a), port), Proto::Udp).unwrap();
            assert_eq!(p.pools[i * SPACES + space_of(Proto::Udp)].ring[tail], port);
        }
        // An address that is not an IPv6 SNAT address warms nothing.
        let rec = Recorder::default();
        p.warm_free_v6(&rec, "2001:db8::9".parse().unwrap(), 1025, Proto::Udp);
        assert!(rec.0.borrow().is_empty());
        // No IPv6 address at all: no guess, and no panic.
        let only4 = SnatPorts::new(WorkerId(0), 1, &addrs[1..2], 2000..=2000).unwrap();
        let mut g = only4.alloc_guess_v6();
        assert_eq!(
            only4.warm_alloc_v6(&Recorder::default(), &mut g, Proto::Tcp),
            None
        );
    }

    #[test]
    fn snat_alloc_v4_skips_the_other_family_and_exhausted_addresses() {
        // IPv6 addresses between the IPv4 ones are not handed out toward an
        // IPv4 backend, and the round-robin goes on past a dry address.
        let addrs = [
            v4(198, 51, 100, 1),
            "2001:db8::1".parse().unwrap(),
            v4(198, 51, 100, 2),
        ];
        // One port per address and protocol.
        let mut p = SnatPorts::new(WorkerId(0), 1, &addrs, 2000..=2000).unwrap();
        let a1 = Ipv4Addr::new(198, 51, 100, 1);
        let a2 = Ipv4Addr::new(198, 51, 100, 2);
        assert_eq!(p.alloc_v4(Proto::Udp), Some((a1, 2000)));
        assert_eq!(p.alloc_v4(Proto::Tcp), Some((a2, 2000)));
        assert_eq!(p.alloc_v4(Proto::Tcp), Some((a1, 2000)));
        assert_eq!(p.alloc_v4(Proto::Tcp), None);
        p.free_v4(a2, 2000, Proto::Tcp).unwrap();
        assert_eq!(
            p.alloc((v4(10, 0, 0, 1), 80), Proto::Tcp),
            Some((IpAddr::V4(a2), 2000))
        );
        // The IPv6 address's pool was never touched.
        assert_eq!(p.available(addrs[1], Proto::Tcp), 1);
        assert_eq!(
            p.alloc(("2001:db8::9".parse().unwrap(), 80), Proto::Tcp),
            Some((addrs[1], 2000))
        );
        assert_eq!(
            p.free_v4(Ipv4Addr::new(198, 51, 100, 3), 2000, Proto::Tcp),
            Err(SnatFreeError::UnknownAddress)
        );
        assert_eq!(p.free_v4(a2, 2000, Proto::Udp), Err(SnatFreeError::NotInUse));
    }

    #[test]
    fn snat_alloc_v6_skips_the_other_family_and_exhausted_addresses() {
        // As for IPv4: IPv4 addresses between the IPv6 ones are not handed
        // out toward an IPv6 backend, and the round-robin goes on past a
        // dry address.
        let a1: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let a2: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let addrs = [IpAddr::V6(a1), v4(198, 51, 100, 1), IpAddr::V6(a2)];
        let mut p = SnatPorts::new(WorkerId(0), 1, &addrs, 2000..=2000).unwrap();
        assert_eq!(p.alloc_v6(Proto::Udp), Some((a1, 2000)));
        assert_eq!(p.alloc_v6(Proto::Tcp), Some((a2, 2000)));
        assert_eq!(p.alloc_v6(Proto::Tcp), Some((a1, 2000)));
        assert_eq!(p.alloc_v6(Proto::Tcp), None);
        p.free((IpAddr::V6(a2), 2000), Proto::Tcp).unwrap();
        assert_eq!(
            p.alloc(("2001:db8::9".parse().unwrap(), 80), Proto::Tcp),
            Some((IpAddr::V6(a2), 2000))
        );
        // The IPv4 address's pool was never touched.
        assert_eq!(p.available(addrs[1], Proto::Tcp), 1);
        assert_eq!(
            p.alloc_v4(Proto::Tcp),
            Some((Ipv4Addr::new(198, 51, 100, 1), 2000))
        );
        // No IPv6 address at all: nothing, and no panic.
        let mut only4 = SnatPorts::new(WorkerId(0), 1, &addrs[1..2], 2000..=2000).unwrap();
        assert_eq!(only4.alloc_v6(Proto::Tcp), None);
    }

    #[test]
    fn snat_warm_free_targets_the_word_free_clears_and_the_slot_it_writes() {
        let addrs = [v4(198, 51, 100, 1), v4(198, 51, 100, 2)];
        let mut p = SnatPorts::new(WorkerId(0), 1, &addrs, 1024..=65535).unwrap();
        let mut held = Vec::new();
        for _ in 0..300 {
            held.push(p.alloc_v4(Proto::Udp).unwrap());
        }
        for &(a, port) in held.iter().rev().step_by(7) {
            let rec = Recorder::default();
            p.warm_free_v4(&rec, a, port, Proto::Udp);
            let i = addrs.iter().position(|x| *x == IpAddr::V4(a)).unwrap();
            let pool = &p.pools[i * SPACES + space_of(Proto::Udp)];
            let word = &pool.in_use[usize::from(port) / 64];
            let tail = (pool.head + pool.len) % pool.ring.len();
            let slot = &pool.ring[tail];
            assert_eq!(
                *rec.0.borrow(),
                [word as *const u64 as usize, slot as *const u16 as usize]
            );
            p.free_v4(a, port, Proto::Udp).unwrap();
            assert_eq!(p.pools[i * SPACES + space_of(Proto::Udp)].ring[tail], port);
        }
        // An unknown address warms nothing.
        let rec = Recorder::default();
        p.warm_free_v4(&rec, Ipv4Addr::new(203, 0, 113, 1), 1024, Proto::Udp);
        assert!(rec.0.borrow().is_empty());
    }

    #[test]
    fn snat_free_finds_each_of_the_most_addresses() {
        // 64 addresses, consecutive and spread over /8s, so several share
        // a home slot of the IPv4 map and probe past each other.
        let addrs: Vec<IpAddr> = (0..SnatPorts::MAX_ADDRESSES as u32)
            .map(|i| {
                IpAddr::V4(Ipv4Addr::from(if i % 2 == 0 {
                    0x0a00_0000 + i
                } else {
                    i << 24 | 1
                }))
            })
            .collect();
        let mut p = SnatPorts::new(WorkerId(0), 1, &addrs, 1024..=1025).unwrap();
        let be = (v4(10, 9, 0, 1), 80);
        let held: Vec<_> = (0..2 * addrs.len())
            .map(|_| p.alloc(be, Proto::Udp).unwrap())
            .collect();
        assert_eq!(p.alloc(be, Proto::Udp), None);
        for &pair in &held {
            p.free(pair, Proto::Udp).unwrap();
        }
        for &a in &addrs {
            assert_eq!(p.available(a, Proto::Udp), 2, "{a}");
        }
        for unknown in [v4(10, 0, 0, 64), v4(0, 0, 0, 0), v4(255, 255, 255, 255)] {
            assert_eq!(
                p.free((unknown, 1024), Proto::Udp),
                Err(SnatFreeError::UnknownAddress)
            );
        }
    }

    #[test]
    fn snat_never_hands_out_a_port_in_use() {
        let addrs = [
            v4(198, 51, 100, 1),
            v4(198, 51, 100, 2),
            "2001:db8::1".parse().unwrap(),
        ];
        let mut p = SnatPorts::new(WorkerId(0), 2, &addrs, 1024..=2047).unwrap();
        let mut live = std::collections::HashSet::new();
        let mut x = 1u32;
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            // One backend in three is IPv6; two operations in three allocate.
            let be = match i % 3 {
                0 => ("2001:db8::9".parse().unwrap(), 80),
                _ => (v4(10, 0, 0, 9), 80),
            };
            if !x.is_multiple_of(3) {
                if let Some(pair) = p.alloc(be, Proto::Udp) {
                    assert_eq!(pair.0.is_ipv4(), be.0.is_ipv4(), "family follows the backend");
                    assert!(live.insert(pair), "{pair:?} handed out twice");
                }
            } else if let Some(&pair) = live.iter().next() {
                live.remove(&pair);
                p.free(pair, Proto::Udp).unwrap();
            }
        }
    }

    #[test]
    fn snat_new_rejects_bad_config() {
        let a = [v4(198, 51, 100, 1)];
        assert!(matches!(
            SnatPorts::new(WorkerId(2), 2, &a, 1024..=65535),
            Err(SnatNewError::WorkerOutOfRange { .. })
        ));
        assert!(matches!(
            SnatPorts::new(WorkerId(1), 4, &a, 1024..=1024),
            Err(SnatNewError::NoPorts { .. })
        ));
        assert_eq!(
            SnatPorts::new(WorkerId(0), 1, &[a[0], a[0]], 1024..=2000).unwrap_err(),
            SnatNewError::BadAddresses
        );
    }
}
