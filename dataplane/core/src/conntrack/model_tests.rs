//! [`Conntrack`] under random operations (proptest): against a model (a
//! hash map of connections) through inserts, lookups of both directions,
//! packets, removals, clock advances and sweeps; and its internal
//! invariants through churn in a small full table that evicts.

use std::collections::HashMap;
use std::net::IpAddr;

use proptest::prelude::*;

use super::tcp_flags::{ACK, FIN};
use super::tests::{client, dnat, ip, key, table, BACKEND, S, SNAT, VIP};
use super::*;
use crate::flow::{Proto, SnatPorts, WorkerId};
use crate::prefetch::Loads;

/// A model operation; keys and backends are drawn from small pools so that
/// duplicates and reply conflicts happen often.
#[derive(Debug, Clone)]
enum Op {
    /// `past_expired`: on a reply conflict, evict what is in the way if
    /// it has all expired and insert again, as the worker does.
    Insert {
        c: u8,
        v: u8,
        b: u8,
        snat: Option<u8>,
        past_expired: bool,
    },
    Lookup {
        c: u8,
        v: u8,
    },
    LookupReply {
        b: u8,
        c: u8,
        snat: Option<u8>,
    },
    Touch {
        c: u8,
        v: u8,
        reply: bool,
    },
    Remove {
        c: u8,
        v: u8,
    },
    Advance {
        secs: u16,
    },
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    let small = || 0u8..6;
    prop_oneof![
        4 => (small(), 0u8..2, 0u8..3, proptest::option::of(0u8..4), any::<bool>())
            .prop_map(|(c, v, b, snat, past_expired)| Op::Insert { c, v, b, snat, past_expired }),
        2 => (small(), 0u8..2).prop_map(|(c, v)| Op::Lookup { c, v }),
        2 => (0u8..3, small(), proptest::option::of(0u8..4))
            .prop_map(|(b, c, snat)| Op::LookupReply { b, c, snat }),
        2 => (small(), 0u8..2, any::<bool>()).prop_map(|(c, v, reply)| Op::Touch { c, v, reply }),
        1 => (small(), 0u8..2).prop_map(|(c, v)| Op::Remove { c, v }),
        1 => (0u16..400).prop_map(|secs| Op::Advance { secs }),
        1 => Just(Op::Expire),
    ]
}

fn model_key(c: u8, v: u8) -> FlowKey {
    key(
        (ip(10, 0, 0, c % 3), 1000 + (c / 3) as u16),
        (ip(192, 0, 2, 1), 80 + v as u16),
        Proto::Udp,
    )
}

fn model_backend(b: u8) -> (IpAddr, u16) {
    (ip(10, 9, 0, b % 2), 8080 + (b / 2) as u16)
}

fn model_nat(b: u8, snat: Option<u8>) -> Nat {
    match snat {
        None => Nat::Dnat {
            backend: model_backend(b),
        },
        Some(p) => Nat::FullNat {
            backend: model_backend(b),
            snat: (SNAT, 2000 + p as u16),
        },
    }
}

/// UDP states of the model: no answer, answered (not yet a stream), stream.
const UNREPLIED: u8 = 0;
const ANSWERED: u8 = 1;
const STREAM: u8 = 2;

/// The model: original key -> (nat, expires, UDP state); and the addresses
/// the table keeps reply cells for (`reply_ports.rs`), all ports (one
/// worker).
#[derive(Default)]
struct Model {
    entries: HashMap<FlowKey, (Nat, u64, u8)>,
    routed: Vec<IpAddr>,
}

impl Model {
    fn reply(k: &FlowKey, nat: &Nat) -> FlowKey {
        nat.reply_key(k).unwrap()
    }

    /// (original key, direction) that `k` matches.
    fn lookup(&self, k: &FlowKey) -> Option<(FlowKey, Direction)> {
        if self.entries.contains_key(k) {
            return Some((*k, Direction::Original));
        }
        self.entries
            .iter()
            .find(|(o, (n, _, _))| Self::reply(o, n) == *k)
            .map(|(o, _)| (*o, Direction::Reply))
    }

    fn insert(&mut self, k: FlowKey, nat: Nat, now: u64) -> Result<(), InsertError> {
        let reply = Self::reply(&k, &nat);
        if self.entries.contains_key(&k) {
            return Err(InsertError::Exists);
        }
        if reply == k || self.lookup(&reply).is_some() {
            return Err(InsertError::ReplyConflict);
        }
        // One reply key per routed (address, protocol, port): UDP only
        // here.
        let taken = |r: FlowKey| self.routed.contains(&r.dst().0) && r.dst() == reply.dst();
        if self.entries.iter().any(|(o, (n, _, _))| taken(Self::reply(o, n))) {
            return Err(InsertError::ReplyConflict);
        }
        self.entries.insert(k, (nat, now + 30 * S, UNREPLIED));
        Ok(())
    }

    /// How many entries `Conntrack::take_expired_in_way` removes for `k`
    /// with `nat` at `now`: every entry that holds its reply key (either
    /// direction) or the routed reply endpoint, if all have expired; none
    /// if one lives.
    fn take_expired_in_way(&mut self, k: FlowKey, nat: Nat, now: u64) -> usize {
        let reply = Self::reply(&k, &nat);
        if reply == k {
            return 0;
        }
        let taken = |r: FlowKey| self.routed.contains(&r.dst().0) && r.dst() == reply.dst();
        let in_way: Vec<FlowKey> = self
            .entries
            .iter()
            .filter(|(o, (n, _, _))| **o == reply || Self::reply(o, n) == reply || taken(Self::reply(o, n)))
            .map(|(o, _)| *o)
            .collect();
        if in_way.iter().any(|o| self.entries[o].1 > now) {
            return 0;
        }
        for o in &in_way {
            self.entries.remove(o);
        }
        in_way.len()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn behaves_like_a_hashmap_model(ops in proptest::collection::vec(op(), 1..120), cells in 0usize..4) {
        // Reply cells: none; for the SNAT address (full-NAT replies); and
        // also for the VIP (originals routed to cells, kept in the index)
        // and a client address (DNAT replies routed to cells).
        let routed = [vec![], vec![SNAT], vec![SNAT, VIP.0, ip(10, 0, 0, 1)], vec![ip(10, 0, 0, 2)]][cells].clone();
        let mut ct = if cells == 0 {
            table(64, 4)
        } else {
            let pool = SnatPorts::new(WorkerId(0), 1, &routed, 1024..=65535).unwrap();
            Conntrack::with_snat_ports(Config { hash_seed: 0x5eed, ..Config::new(64, 4) }, &pool).unwrap()
        };
        let mut model = Model { routed, ..Model::default() };
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Insert { c, v, b, snat, past_expired } => {
                    let (k, nat) = (model_key(c, v), model_nat(b, snat));
                    let mut real = ct.insert(k, nat, Tags::default(), Tick(now), |_| panic!("no eviction"));
                    let mut want = model.insert(k, nat, now);
                    prop_assert_eq!(real.map(|_| ()), want);
                    if past_expired && want == Err(InsertError::ReplyConflict) {
                        let mut gone = 0;
                        let taken = ct.take_expired_in_way(k, nat, Tick(now), |_| gone += 1);
                        prop_assert_eq!(gone, model.take_expired_in_way(k, nat, now));
                        prop_assert_eq!(taken, gone > 0);
                        if taken {
                            real = ct.insert(k, nat, Tags::default(), Tick(now), |_| panic!("no eviction"));
                            want = model.insert(k, nat, now);
                            prop_assert_eq!(real.map(|_| ()), want);
                            prop_assert!(want.is_ok());
                        }
                    }
                }
                Op::Lookup { c, v } => {
                    let k = model_key(c, v);
                    let mut burst = [None];
                    ct.lookup_burst(&Loads, &[k], &mut burst);
                    prop_assert_eq!(burst[0], ct.lookup(&k));
                    let real = ct.lookup(&k).map(|(id, d)| (ct.get(id).unwrap().original, d));
                    prop_assert_eq!(real, model.lookup(&k));
                }
                Op::LookupReply { b, c, snat } => {
                    let dst = snat.map_or((ip(10, 0, 0, c % 3), 1000 + (c / 3) as u16), |p| (SNAT, 2000 + p as u16));
                    let k = key(model_backend(b), dst, Proto::Udp);
                    let real = ct.lookup(&k).map(|(id, d)| (ct.get(id).unwrap().original, d));
                    prop_assert_eq!(real, model.lookup(&k));
                }
                Op::Touch { c, v, reply } => {
                    let k = model_key(c, v);
                    if let Some((id, _)) = ct.lookup(&k) {
                        let dir = if reply { Direction::Reply } else { Direction::Original };
                        ct.on_packet(id, dir, 0, Tick(now));
                        let m = model.entries.get_mut(&k).unwrap();
                        // Answered: the timeout runs from the answer; a
                        // packet 2 s or more after it makes a stream.
                        match m.2 {
                            UNREPLIED if reply => (m.2, m.1) = (ANSWERED, now + 30 * S),
                            UNREPLIED => m.1 = now + 30 * S,
                            // Expired, not swept: answered again from now.
                            ANSWERED if now >= m.1 => m.1 = now + 30 * S,
                            ANSWERED if now >= m.1 - 30 * S + 2 * S => (m.2, m.1) = (STREAM, now + 300 * S),
                            ANSWERED => {}
                            _ => m.1 = now + 300 * S,
                        }
                        prop_assert_eq!(ct.get(id).unwrap().expires, Tick(m.1));
                    }
                }
                Op::Remove { c, v } => {
                    let k = model_key(c, v);
                    let real = ct.lookup(&k).and_then(|(id, _)| ct.remove(id)).map(|e| e.original);
                    prop_assert_eq!(real, model.entries.remove(&k).map(|_| k));
                }
                Op::Advance { secs } => now += secs as u64 * S,
                Op::Expire => {
                    let mut real = Vec::new();
                    ct.expire(Tick(now), 68, |e| real.push(e.original));
                    let mut want: Vec<FlowKey> =
                        model.entries.iter().filter(|(_, m)| m.1 <= now).map(|(k, _)| *k).collect();
                    model.entries.retain(|_, m| m.1 > now);
                    let order = |k: &FlowKey| format!("{k:?}");
                    real.sort_by_key(order);
                    want.sort_by_key(order);
                    prop_assert_eq!(real, want);
                }
            }
            prop_assert_eq!(ct.len(), model.entries.len());
        }
        ct.check();
    }

    #[test]
    fn invariants_hold_under_churn_and_eviction(
        ops in proptest::collection::vec((0u16..200, 0u8..4, any::<bool>()), 1..400),
        cells in any::<bool>(),
    ) {
        // DNAT in a table without reply cells, or full-NAT with them as
        // worker 1 of 2, so half of the SNAT ports below (those outside
        // the worker's share) stay in the hashed index.
        let config = Config { evict_window: 4, ..Config::new(16, 0) };
        let pool = SnatPorts::new(WorkerId(1), 2, &[SNAT], 1024..=65535).unwrap();
        let mut ct = if cells {
            Conntrack::with_snat_ports(config, &pool).unwrap()
        } else {
            Conntrack::new(config).unwrap()
        };
        let mut now = 0;
        let mut live: HashMap<FlowKey, ()> = HashMap::new();
        for (c, action, flag) in ops {
            now += 700;
            let k = key(client(c), VIP, if flag { Proto::Tcp } else { Proto::Udp });
            match action {
                0 | 1 => {
                    // A SNAT port per client: unique among live entries.
                    let nat = if cells {
                        Nat::FullNat { backend: BACKEND, snat: (SNAT, 2000 + c) }
                    } else {
                        dnat()
                    };
                    let r = ct.insert(k, nat, Tags::default(), Tick(now), |e| {
                        live.remove(&e.original);
                    });
                    if r.is_ok() {
                        live.insert(k, ());
                    }
                }
                2 => if let Some((id, d)) = ct.lookup(&k) {
                    let reply = ct.get(id).unwrap().reply();
                    prop_assert_eq!(ct.lookup(&reply), Some((id, Direction::Reply)));
                    ct.on_packet(id, d, if flag { ACK } else { FIN }, Tick(now));
                },
                _ => { ct.expire(Tick(now), 5, |e| { live.remove(&e.original); }); }
            }
            prop_assert_eq!(ct.len(), live.len());
            ct.check();
        }
    }
}
