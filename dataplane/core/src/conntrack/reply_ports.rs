//! Full-NAT reply keys found by their SNAT port instead of by hash.
//!
//! A full-NAT connection's reply key is `backend → SNAT address:port`, and
//! [`SnatPorts`] never hands out a (SNAT address, protocol, port) that is
//! in use: the destination alone names the connection. So a table of one
//! cell per (address, protocol space, port), holding the slab index of the
//! connection whose reply key goes to that destination, finds the reply
//! with one load, where the hashed index would take a probe run in a
//! table twice the size. What that saves is not the reply's lookup (one
//! cache line either way) but the index's size and traffic: with the reply
//! keys of full-NAT connections out of it, a full-NAT connection costs one
//! index entry instead of two, and a new one (or an evicted one, under a
//! SYN flood) edits one random probe run of the index, not two. Measured:
//! bench/RESULTS.md.
//!
//! The cells are an index of their own, by rule, not by kind of
//! connection: a key is *routed* to a cell when its destination address is
//! one of the SNAT addresses the table was built with, its destination
//! port is in this worker's share (`port & mask == worker`: only those are
//! ever handed out here) and its protocol has a port space (TCP, UDP,
//! ICMP/ICMPv6 echo identifiers, as in [`SnatPorts`]). Every connection
//! whose reply key is routed keeps it in its cell and not in the hashed
//! index, whatever its translation (a DNAT connection whose client claims
//! to be a SNAT address too), and a second connection with a reply key
//! routed to a taken cell is refused
//! ([`InsertError::ReplyConflict`](super::InsertError::ReplyConflict)):
//! `SnatPorts` never gives a worker's connections such a pair. Original
//! keys always stay in the hashed index, even routed ones (a VIP that is
//! also a SNAT address); the table counts those, and a routed key is
//! looked up in the index as well only while that count is not zero.
//!
//! Memory: a `u32` a cell, `3 × 65536 / share` cells per SNAT address of
//! the family, `share` being the number of workers rounded up to a power
//! of two: 768 KiB an address with one worker, 96 KiB with eight. The
//! cells are zeroed memory that the allocator maps lazily, so a port range
//! never used costs no RAM.
//!
//! [`SnatPorts`]: crate::flow::SnatPorts

use core::ops::RangeInclusive;

use super::table::{Addr, RawKey};
use crate::flow::v4_home;
use crate::prefetch::Prefetch;

/// "Not routed to a cell": a cell number no table reaches.
pub(crate) const NO_CELL: u32 = u32::MAX;

/// Slots of the address map: the range of `v4_home`, four times the most
/// addresses ([`crate::flow::SnatPorts::MAX_ADDRESSES`]), so a lookup of an
/// address that is not there usually stops at the first slot.
const MAP_SLOTS: usize = 256;

/// An empty slot of the address map (no address's first cell).
const NO_ADDR: u32 = u32::MAX;

/// Protocol spaces per address, as in `SnatPorts`.
const SPACES: u32 = 3;

/// No port space.
const NO_SPACE: u8 = u8::MAX;

/// The port space of each IP protocol number: TCP, UDP, ICMP and ICMPv6
/// echo identifiers; [`NO_SPACE`] for anything else. A table: one load
/// where a `match` was three compares.
const SPACE_OF: [u8; 256] = {
    let mut t = [NO_SPACE; 256];
    t[6] = 0;
    t[17] = 1;
    t[1] = 2;
    t[58] = 2;
    t
};

/// Why [`ReplyPorts::new`] refused its addresses: more than 64, or a
/// duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadAddresses;

/// One family's cells; see the module docs. Its `Debug` lists the taken
/// cells only (`cell: slab index`): the cells are 192k `u32` an
/// address with one worker, nearly all 0, and printing them all made a
/// worker's `Debug` a megabyte.
pub(crate) struct ReplyPorts<A> {
    /// `(address, its first cell)` pairs, open addressing with linear
    /// probing, [`NO_ADDR`] marking an empty slot. A fixed-size array, so
    /// the home slot's load needs no bounds check: most keys (all but
    /// replies) are told apart by that one load.
    map: Box<[(A, u32); MAP_SLOTS]>,
    /// Per address and space, `1 << space_shift` cells: slab index + 1,
    /// 0 for none.
    cells: Box<[u32]>,
    mask: u16,
    worker: u16,
    /// `mask.count_ones()`: a port's cell in its space is `port >> shift`.
    shift: u32,
    /// `16 - shift`: a space's cells start at `space << space_shift`.
    space_shift: u32,
}

impl<A: core::fmt::Debug> core::fmt::Debug for ReplyPorts<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        struct Taken<'a, A>(&'a ReplyPorts<A>);
        impl<A> core::fmt::Debug for Taken<'_, A> {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_map().entries(self.0.occupied()).finish()
            }
        }
        let addrs: Vec<_> = self.map.iter().filter(|(_, first)| *first != NO_ADDR).collect();
        f.debug_struct("ReplyPorts")
            .field("map", &addrs)
            .field("cells", &self.cells.len())
            .field("taken", &Taken(self))
            .field("mask", &self.mask)
            .field("worker", &self.worker)
            .field("shift", &self.shift)
            .field("space_shift", &self.space_shift)
            .finish()
    }
}

impl<A> ReplyPorts<A> {
    /// Every non-empty cell as `(cell, slab index)`. Skips empty runs of
    /// 16 cells with one vectorized test each: a table is ~200k cells.
    pub fn occupied(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        const RUN: usize = 16;
        self.cells
            .chunks(RUN)
            .enumerate()
            .filter(|(_, run)| run.iter().fold(0, |acc, c| acc | c) != 0)
            .flat_map(|(r, run)| {
                run.iter()
                    .enumerate()
                    .filter(|(_, v)| **v != 0)
                    .map(move |(i, v)| ((r * RUN + i) as u32, v - 1))
            })
    }
}

impl<A: Addr> ReplyPorts<A> {
    /// No addresses: nothing is routed to a cell.
    pub fn none() -> Self {
        ReplyPorts {
            map: Box::new([(A::default(), NO_ADDR); MAP_SLOTS]),
            cells: Box::new([]),
            mask: 0,
            worker: 0,
            shift: 0,
            space_shift: 16,
        }
    }

    /// Cells for the reply keys to `addrs` (distinct) on the ports of
    /// worker `worker` under `mask` (`flow::snat_port_mask`: a power of
    /// two less one). At most 64 addresses, no duplicates.
    pub fn new(addrs: &[A], mask: u16, worker: u16) -> Result<Self, BadAddresses> {
        if addrs.is_empty() {
            return Ok(Self::none());
        }
        if addrs.len() * 4 > MAP_SLOTS {
            return Err(BadAddresses);
        }
        debug_assert!(mask.checked_add(1).is_none_or(u16::is_power_of_two));
        let shift = mask.count_ones();
        let space_shift = 16 - shift;
        let mut map = Box::new([(A::default(), NO_ADDR); MAP_SLOTS]);
        for (i, a) in addrs.iter().enumerate() {
            let mut h = home(*a);
            while map[h].1 != NO_ADDR {
                if map[h].0 == *a {
                    return Err(BadAddresses);
                }
                h = (h + 1) % MAP_SLOTS;
            }
            // At most 64 addresses of 3 × 65536 cells: below NO_ADDR.
            map[h] = (*a, (i as u32 * SPACES) << space_shift);
        }
        Ok(ReplyPorts {
            map,
            // Zeroed: the allocator maps it lazily.
            cells: vec![0; addrs.len() * (SPACES << space_shift) as usize].into_boxed_slice(),
            mask,
            worker,
            shift,
            space_shift,
        })
    }

    /// The cell `k` is routed to, or [`NO_CELL`].
    #[inline(always)]
    pub fn cell(&self, k: &RawKey<A>) -> u32 {
        let h = home(k.dst);
        let (a, first) = self.map[h];
        // The map is at most a quarter full: a destination that is no SNAT
        // address (a VIP, a client) usually meets an empty home slot.
        if first == NO_ADDR {
            return NO_CELL;
        }
        let first = if a == k.dst {
            first
        } else {
            self.probe_on(k.dst, h)
        };
        let space = SPACE_OF[usize::from(k.proto)];
        if first == NO_ADDR || space == NO_SPACE || k.dport & self.mask != self.worker {
            return NO_CELL;
        }
        first + (u32::from(space) << self.space_shift) + (u32::from(k.dport) >> self.shift)
    }

    /// The first cell of `a`, whose home slot `h` holds another address,
    /// or [`NO_ADDR`].
    #[cold]
    #[inline(never)]
    fn probe_on(&self, a: A, mut h: usize) -> u32 {
        // Never full (at most 64 of 256 slots): an empty slot ends the walk.
        loop {
            h = (h + 1) % MAP_SLOTS;
            let (b, i) = self.map[h];
            if i == NO_ADDR || b == a {
                return i;
            }
        }
    }

    /// The cells of this worker's ports in `ports` within one space and
    /// address: `(first, count)`. The worker's ports are `mask + 1` apart,
    /// so their cells (`port >> shift`) are consecutive.
    fn run_of(&self, ports: &RangeInclusive<u16>) -> (u32, u32) {
        let (lo, hi, mask) = (
            u32::from(*ports.start()),
            u32::from(*ports.end()),
            u32::from(self.mask),
        );
        let worker = u32::from(self.worker);
        let first = (lo & !mask | worker) + if lo & mask > worker { mask + 1 } else { 0 };
        let Some(last) = (hi & !mask | worker).checked_sub(if hi & mask < worker { mask + 1 } else { 0 })
        else {
            return (0, 0);
        };
        if first > last || lo > hi {
            return (0, 0);
        }
        (
            first >> self.shift,
            (last >> self.shift) - (first >> self.shift) + 1,
        )
    }

    /// How many cells the protocol numbered `proto` has for this worker's
    /// ports in `ports`, on all addresses together (0 for a protocol
    /// without a port space): the range of [`ReplyPorts::space_cell`]'s
    /// `i`.
    pub fn space_cells(&self, proto: u8, ports: &RangeInclusive<u16>) -> u32 {
        if SPACE_OF[usize::from(proto)] == NO_SPACE || self.cells.is_empty() {
            return 0;
        }
        // `cells` holds SPACES spaces of `1 << space_shift` per address.
        let addrs = (self.cells.len() as u32) / (SPACES << self.space_shift);
        addrs * self.run_of(ports).1
    }

    /// The `i`th (`i < space_cells(proto, ports)`) of those cells: the
    /// addresses in turn, each's ports in order.
    pub fn space_cell(&self, proto: u8, ports: &RangeInclusive<u16>, i: u32) -> u32 {
        let space = u32::from(SPACE_OF[usize::from(proto)]);
        let (first, count) = self.run_of(ports);
        let (addr, k) = (i / count, i % count);
        ((addr * SPACES + space) << self.space_shift) + first + k
    }

    /// The slab index in `cell` (not [`NO_CELL`]), if any.
    #[inline(always)]
    pub fn get(&self, cell: u32) -> Option<u32> {
        self.cells[cell as usize].checked_sub(1)
    }

    /// [`ReplyPorts::get`] as a raw value: the slab index, or `u32::MAX`
    /// for none. Branch-free, for the burst's overlapped loads.
    #[inline(always)]
    pub fn peek(&self, cell: u32) -> u32 {
        self.cells[cell as usize].wrapping_sub(1)
    }

    /// Puts slab index `idx` in `cell`, which is empty.
    #[inline]
    pub fn set(&mut self, cell: u32, idx: u32) {
        debug_assert_eq!(self.cells[cell as usize], 0, "reply cell taken");
        self.cells[cell as usize] = idx + 1;
    }

    /// Empties `cell`, which holds `idx`.
    #[inline]
    pub fn clear(&mut self, cell: u32, idx: u32) {
        debug_assert_eq!(
            self.cells[cell as usize],
            idx + 1,
            "reply cell holds another entry"
        );
        self.cells[cell as usize] = 0;
    }

    /// Warms `cell`'s line.
    #[inline(always)]
    pub fn prefetch(&self, p: &impl Prefetch, cell: u32) {
        p.prefetch(&self.cells[cell as usize]);
    }

    /// The address of `cell`, as a prefetch records it; for tests.
    #[cfg(test)]
    pub fn cell_addr(&self, cell: u32) -> usize {
        &self.cells[cell as usize] as *const u32 as usize
    }
}

/// The home slot of an address in the map: `SnatPorts`' hash of its
/// own address map, on the address folded to 32 bits.
#[inline(always)]
fn home<A: Addr>(a: A) -> usize {
    v4_home(a.fold())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(dst: [u8; 4], dport: u16, proto: u8) -> RawKey<[u8; 4]> {
        RawKey {
            src: [10, 0, 0, 1],
            dst,
            sport: 80,
            dport,
            proto,
        }
    }

    /// The cells `space_cell` walks are exactly those of the worker's
    /// ports in the range, on each address, in the protocol's space.
    #[test]
    fn space_cells_are_the_worker_ports_of_a_range() {
        let addrs = [[10, 1, 0, 100], [10, 1, 0, 101]];
        for (mask, worker) in [(0u16, 0u16), (7, 3), (7, 0), (7, 7), (1, 1)] {
            let t = ReplyPorts::new(&addrs, mask, worker).unwrap();
            for (lo, hi) in [
                (1024, 65535),
                (1029, 2000),
                (1024, 1026),
                (2000, 2003),
                (65535, 65535),
                (5, 4),
            ] {
                let ports = lo..=hi;
                let mut want = Vec::new();
                for a in addrs {
                    for p in (lo..=hi).filter(|p| p & mask == worker) {
                        let k = RawKey {
                            src: [10, 1, 0, 11],
                            dst: a,
                            sport: 8080,
                            dport: p,
                            proto: 17,
                        };
                        want.push(t.cell(&k));
                    }
                }
                let n = t.space_cells(17, &ports);
                let got: Vec<u32> = (0..n).map(|i| t.space_cell(17, &ports, i)).collect();
                assert_eq!(got, want, "mask {mask} worker {worker} ports {lo}-{hi}");
            }
            assert_eq!(t.space_cells(47, &(1024..=65535)), 0, "GRE has no ports");
        }
    }

    #[test]
    fn routes_exactly_the_worker_share_of_known_addresses_and_spaces() {
        let addrs: Vec<[u8; 4]> = (0..64).map(|i| [198, 51, 100, i]).collect();
        // Worker 2 of 3 (mask 3): ports ending in 0b10.
        let rp = ReplyPorts::new(&addrs, 3, 2).unwrap();
        let mut seen = std::collections::HashSet::new();
        for (ai, a) in addrs.iter().enumerate() {
            for proto in [6u8, 17, 1, 58, 47] {
                for port in [0u16, 1, 2, 6, 1026, 65534, 65535] {
                    let c = rp.cell(&key(*a, port, proto));
                    let routed = port & 3 == 2 && proto != 47;
                    assert_eq!(c != NO_CELL, routed, "{a:?} {port} {proto}");
                    if routed {
                        assert!((c as usize) < rp.cells.len());
                        // ICMP and ICMPv6 share a space; all else distinct.
                        let p = if proto == 58 { 1 } else { proto };
                        assert!(seen.insert(c) || p == 1, "cell {c} twice");
                        assert_eq!((c >> rp.space_shift) / SPACES, ai as u32);
                    }
                }
            }
        }
        for other in [[198, 51, 100, 64], [0, 0, 0, 0], [10, 0, 0, 1]] {
            assert_eq!(rp.cell(&key(other, 2, 6)), NO_CELL);
        }
        assert_eq!(ReplyPorts::<[u8; 4]>::none().cell(&key(addrs[0], 2, 6)), NO_CELL);
        let many: Vec<[u8; 4]> = (0..65).map(|i| [198, 51, 101, i]).collect();
        assert_eq!(ReplyPorts::new(&many, 0, 0).unwrap_err(), BadAddresses);
        assert_eq!(
            ReplyPorts::new(&[[1, 1, 1, 1]; 2], 0, 0).unwrap_err(),
            BadAddresses
        );
    }

    #[test]
    fn cells_hold_one_index_each() {
        let mut rp = ReplyPorts::new(&[[192, 0, 2, 1]], 0, 0).unwrap();
        assert_eq!(rp.cells.len(), 3 * 65536);
        let c = rp.cell(&key([192, 0, 2, 1], 65535, 17));
        assert_eq!((rp.get(c), rp.peek(c)), (None, u32::MAX));
        rp.set(c, 0);
        assert_eq!((rp.get(c), rp.peek(c)), (Some(0), 0));
        assert_eq!(rp.occupied().collect::<Vec<_>>(), [(c, 0)]);
        rp.clear(c, 0);
        assert_eq!(rp.get(c), None);
        assert_eq!(rp.occupied().count(), 0);
    }

    #[test]
    fn debug_lists_the_taken_cells_only() {
        let fresh = ReplyPorts::new(&[[192, 0, 2, 1]], 0, 0).unwrap();
        let mut rp = ReplyPorts::new(&[[192, 0, 2, 1]], 0, 0).unwrap();
        let empty = format!("{rp:?}");
        assert_eq!(empty, format!("{fresh:?}"));
        assert!(empty.contains("cells: 196608, taken: {}"), "{empty}");
        assert!(empty.len() < 300, "{empty}");
        let c = rp.cell(&key([192, 0, 2, 1], 40000, 6));
        rp.set(c, 7);
        let one = format!("{rp:?}");
        assert!(one.contains(&format!("taken: {{{c}: 7}}")), "{one}");
        // Two tables differ in their Debug exactly when their cells do.
        assert_ne!(one, empty);
        rp.clear(c, 7);
        assert_eq!(format!("{rp:?}"), empty);
    }
}
