//! Counter-slot assignment for frontends and backends (see the
//! [`builder`](super::builder) module doc): explicit slots first, then slots
//! carried over from the previous snapshot, then the lowest free slot.
//! Invariant: an assigned slot is ≤ `MAX_STATS_SLOT` and, unless the caller
//! gave the same explicit slot twice, unique within its space.

use std::net::IpAddr;

use hashbrown::HashMap;

use std::sync::Arc;

use super::builder::{Built, MAX_STATS_SLOT, UNASSIGNED};
use super::{v4_key, v6_key, Frontend, Service, Snapshot, V6Key};
use crate::flow::Proto;

/// A set of used slots with a lowest-free cursor.
#[derive(Debug, Default)]
struct SlotSet {
    bits: Vec<u64>,
    cursor: u32,
    /// Highest slot used + 1.
    len: u32,
}

impl SlotSet {
    fn is_used(&self, s: u32) -> bool {
        self.bits
            .get((s / 64) as usize)
            .is_some_and(|w| w & (1 << (s % 64)) != 0)
    }

    fn mark(&mut self, s: u32) {
        let w = (s / 64) as usize;
        if w >= self.bits.len() {
            self.bits.resize(w + 1, 0);
        }
        self.bits[w] |= 1 << (s % 64);
        self.len = self.len.max(s + 1);
    }

    /// The lowest free slot, now used. Slots are only ever added, so the
    /// cursor never has to move back.
    fn take_lowest(&mut self) -> u32 {
        while self.is_used(self.cursor) {
            self.cursor += 1;
        }
        let s = self.cursor;
        self.mark(s);
        s
    }

    /// `prev` if free, else the lowest free slot.
    fn take(&mut self, prev: Option<u32>) -> u32 {
        match prev {
            Some(p) if p <= MAX_STATS_SLOT && !self.is_used(p) => {
                self.mark(p);
                p
            }
            _ => self.take_lowest(),
        }
    }
}

/// Explicit slots, then carried-over slots, then lowest free, so that a new
/// object never takes the slot an unchanged one had. Returns the slot count.
pub(super) fn assign_frontend_slots(
    order: &[(IpAddr, u16, Proto)],
    v4: &mut HashMap<u64, Frontend>,
    v6: &mut HashMap<V6Key, Frontend>,
    services: &[Arc<Service>],
    prev: Option<&Snapshot>,
) -> u32 {
    let mut set = SlotSet::default();
    for f in v4.values().chain(v6.values()) {
        if f.stats_slot != UNASSIGNED {
            set.mark(f.stats_slot);
        }
    }
    let mut pending = Vec::new();
    for &(addr, port, proto) in order {
        let f = match addr {
            IpAddr::V4(a) => v4.get_mut(&v4_key(a, port, proto)),
            IpAddr::V6(a) => v6.get_mut(&v6_key(a, port, proto)),
        };
        let Some(f) = f.filter(|f| f.stats_slot == UNASSIGNED) else {
            continue;
        };
        let name = services.get(f.service.index()).map(|s| &*s.name);
        let carried = prev
            .and_then(|p| p.lookup(addr, port, proto))
            .filter(|(_, s)| Some(s.name()) == name)
            .map(|(pf, _)| pf.stats_slot)
            .filter(|&s| !set.is_used(s));
        match carried {
            Some(s) => {
                set.mark(s);
                f.stats_slot = s;
            }
            None => pending.push((addr, port, proto)),
        }
    }
    for (addr, port, proto) in pending {
        let f = match addr {
            IpAddr::V4(a) => v4.get_mut(&v4_key(a, port, proto)),
            IpAddr::V6(a) => v6.get_mut(&v6_key(a, port, proto)),
        };
        if let Some(f) = f {
            f.stats_slot = set.take(None);
        }
    }
    set.len
}

/// Same three passes as [`assign_frontend_slots`], for backends; `carry`
/// holds each backend's slot in the previous snapshot (or `UNASSIGNED`),
/// service-major and in listed order, for the new services only (kept
/// services' slots count as explicit).
pub(super) fn assign_backend_slots(services: &mut [Built], carry: &[u32]) -> u32 {
    let mut set = SlotSet::default();
    for b in services.iter().flat_map(|s| s.service().backends.iter()) {
        if b.stats_slot != UNASSIGNED {
            set.mark(b.stats_slot);
        }
    }
    let mut pending = Vec::new();
    let mut k = 0;
    for (si, s) in services.iter_mut().enumerate() {
        let Built::New(s) = s else { continue };
        for (bi, b) in s.backends.iter_mut().enumerate() {
            let carried = carry
                .get(k)
                .copied()
                .filter(|&c| c != UNASSIGNED && !set.is_used(c));
            k += 1;
            if b.stats_slot != UNASSIGNED {
                continue;
            }
            match carried {
                Some(slot) => {
                    set.mark(slot);
                    b.stats_slot = slot;
                }
                None => pending.push((si, bi)),
            }
        }
    }
    for (si, bi) in pending {
        if let Some(Built::New(s)) = services.get_mut(si) {
            let Some(b) = s.backends.get_mut(bi) else { continue };
            b.stats_slot = set.take(None);
        }
    }
    set.len
}
