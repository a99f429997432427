//! Random histories through the control plane (proptest): transactions of
//! upserts and deletes, some invalid, resyncs of another source, backend
//! state changes, neighbor sets and restarts from the state file, on a
//! small universe of names and addresses so that operations meet each
//! other (a frontend moves between services, a delete cascades, a resync
//! conflicts with what the API wrote).
//!
//! After every operation:
//! - a rejected one changed nothing: state, revision, published snapshot
//!   and state file are what they were;
//! - an accepted one bumped the revision by one if the state changed, and
//!   the published snapshot carries it;
//! - the published snapshot, built incrementally (services kept from the
//!   previous snapshot, `Snapshot::with_services`, counter slots reused),
//!   is the snapshot a node starting now from the same state would build
//!   from scratch: the same frontends, the same services with the same
//!   policies and backends, **the same Maglev rings slot for slot**, the
//!   same owned addresses and next hops. Two nodes of a fleet with
//!   different histories pick the same backends;
//! - counter slots are distinct among live objects, and a live object
//!   keeps its slot from one operation to the next (until a restart).

use std::collections::{BTreeMap, HashSet};

use lb_dataplane::snapshot::{Family, Service as SnapService};
use proptest::prelude::*;

use super::tests::ip;
use super::*;
use crate::model::{BackendKey, Cidr, FrontendKey, FrontendType, Mode, Protocol, TrafficPolicy};

const SERVICES: [&str; 3] = ["default/a", "default/b", "kube-system/dns"];
const VIPS: [&str; 3] = ["192.0.2.1", "192.0.2.2", "2001:db8::10"];
const BACKENDS: [&str; 6] = [
    "10.1.0.1",
    "10.1.0.2",
    "10.1.0.3",
    "10.1.0.4",
    "2001:db8:1::1",
    "2001:db8:1::2",
];
/// The last is on no port's prefix: a set naming it is refused.
const NEIGHBORS: [&str; 4] = ["10.0.0.254", "10.0.0.7", "2001:db8::7", "198.51.100.9"];

/// `plane_tests`' node with an IPv6 SNAT address too (so that full-NAT
/// services may have IPv6 frontends) and its IPv6 prefix on a port of its
/// own.
fn node() -> NodeConfig {
    let mut n = super::tests::node();
    n.interfaces[1].port = 1;
    n.interfaces[1].mac = [2, 0, 0, 0, 0, 2];
    n.snat_addresses.push(ip("2001:db8::100"));
    n
}

/// One operation of a history.
#[derive(Debug, Clone)]
enum Op {
    /// A transaction from the API.
    Apply(Vec<Change>),
    /// A resync of everything `Source::Config` owns.
    Resync(Vec<Service>, Vec<Frontend>, Vec<Backend>),
    /// `set_backend_state(BACKENDS[addr], port, SERVICES[service], state)`.
    SetState(usize, Option<u16>, Option<usize>, BackendState),
    /// `set_neighbors` with a MAC for each chosen address.
    Neighbors(Vec<(usize, u8)>),
    /// Restart: the plane is opened again from its state file.
    Reopen,
}

fn service_name() -> impl Strategy<Value = String> {
    prop_oneof![
        40 => (0..SERVICES.len()).prop_map(|i| SERVICES[i].to_string()),
        // Invalid: not `namespace/name`.
        1 => Just("no-namespace".to_string()),
    ]
}

fn service() -> impl Strategy<Value = Service> {
    let ranges = prop_oneof![
        Just(vec![]),
        Just(vec!["10.0.0.0/8"]),
        Just(vec!["0.0.0.0/0", "::/0"]),
    ];
    (
        service_name(),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(None), Just(Some(10_800)), Just(Some(60))],
        ranges,
    )
        .prop_map(|(name, full, local, affinity, ranges)| Service {
            name,
            mode: if full { Mode::FullNat } else { Mode::Dnat },
            traffic_policy: if local {
                TrafficPolicy::Local
            } else {
                TrafficPolicy::Cluster
            },
            affinity_timeout_seconds: affinity,
            source_ranges: ranges.into_iter().map(|r| r.parse::<Cidr>().unwrap()).collect(),
            source: Source::Api,
        })
}

fn frontend_key() -> impl Strategy<Value = FrontendKey> {
    (
        0..VIPS.len(),
        prop_oneof![40 => prop_oneof![Just(80u16), Just(443)], 1 => Just(0u16)],
        any::<bool>(),
    )
        .prop_map(|(v, port, udp)| FrontendKey {
            addr: ip(VIPS[v]),
            port,
            protocol: if udp { Protocol::Udp } else { Protocol::Tcp },
        })
}

fn frontend() -> impl Strategy<Value = Frontend> {
    (service_name(), frontend_key(), any::<bool>()).prop_map(|(service, key, lb)| Frontend {
        service,
        key,
        kind: if lb {
            FrontendType::LoadBalancer
        } else {
            FrontendType::ExternalIp
        },
        source: Source::Api,
    })
}

fn backend_key() -> impl Strategy<Value = BackendKey> {
    (
        service_name(),
        0..BACKENDS.len(),
        prop_oneof![4 => Just(8080u16), 1 => Just(9090)],
    )
        .prop_map(|(service, a, port)| BackendKey {
            service,
            addr: ip(BACKENDS[a]),
            port,
        })
}

fn backend_state() -> impl Strategy<Value = BackendState> {
    prop_oneof![
        4 => Just(BackendState::Active),
        1 => Just(BackendState::Terminating),
        1 => Just(BackendState::Quarantined),
        1 => Just(BackendState::Maintenance),
    ]
}

fn backend() -> impl Strategy<Value = Backend> {
    (
        backend_key(),
        // Weight 0 takes no new flows; u32::MAX is over MAX_WEIGHT.
        prop_oneof![40 => 0u32..4, 1 => Just(u32::MAX)],
        backend_state(),
        prop_oneof![Just(None), Just(Some("node-a")), Just(Some("node-b"))],
    )
        .prop_map(|(key, weight, state, node)| Backend {
            key,
            weight,
            state,
            operator_state: None,
            node: node.map(str::to_string),
            zone: None,
            source: Source::Api,
        })
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        1 => service().prop_map(Change::UpsertService),
        4 => frontend().prop_map(Change::UpsertFrontend),
        10 => backend().prop_map(Change::UpsertBackend),
        1 => service_name().prop_map(Change::DeleteService),
        1 => frontend_key().prop_map(Change::DeleteFrontend),
        1 => backend_key().prop_map(Change::DeleteBackend),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Often with one of the services first, so that what follows has
        // a service to belong to.
        12 => (
            prop::option::weighted(0.6, service()),
            prop::collection::vec(change(), 1..5),
        )
            .prop_map(|(s, mut changes)| {
                if let Some(mut s) = s {
                    // The service the next change belongs to.
                    match &changes[0] {
                        Change::UpsertFrontend(f) => s.name.clone_from(&f.service),
                        Change::UpsertBackend(b) => s.name.clone_from(&b.key.service),
                        _ => {}
                    }
                    changes.insert(0, Change::UpsertService(s));
                }
                Op::Apply(changes)
            }),
        2 => (
            prop::collection::vec(service(), 0..3),
            prop::collection::vec(frontend(), 0..3),
            prop::collection::vec(backend(), 0..5),
        )
            .prop_map(|(s, f, b)| Op::Resync(s, f, b)),
        2 => (
            0..BACKENDS.len(),
            prop_oneof![Just(None), Just(Some(8080u16))],
            prop_oneof![Just(None), (0..SERVICES.len()).prop_map(Some)],
            backend_state(),
        )
            .prop_map(|(a, port, s, state)| Op::SetState(a, port, s, state)),
        1 => prop::collection::vec((0..NEIGHBORS.len(), any::<u8>()), 0..3).prop_map(Op::Neighbors),
        1 => Just(Op::Reopen),
    ]
}

type BackendView = (IpAddr, u16, u32, String, Option<Box<str>>);

/// A service as the workers see it: policies, backends (ordered by
/// address) and every slot of both rings as the backend it names.
#[derive(Debug, PartialEq, Eq)]
struct ServiceView {
    policy: String,
    /// (address, port, weight, state, node).
    backends: Vec<BackendView>,
    rings: [Vec<Option<(IpAddr, u16)>>; 2],
}

fn service_view(s: &SnapService) -> ServiceView {
    let mut backends: Vec<_> = s
        .backends()
        .iter()
        .map(|b| (b.addr, b.port, b.weight, format!("{:?}", b.state), b.node.clone()))
        .collect();
    backends.sort();
    let ring = |f: Family| {
        let r = s.ring(f);
        (0..r.size())
            .map(|i| {
                r.slot(i).map(|b| {
                    let b = s.backend(b).expect("a ring names a backend of its service");
                    (b.addr, b.port)
                })
            })
            .collect()
    };
    ServiceView {
        policy: format!(
            "{:?} {:?} {:?} {:?}",
            s.mode(),
            s.traffic_policy(),
            s.affinity(),
            s.source_ranges()
        ),
        backends,
        rings: [ring(Family::V4), ring(Family::V6)],
    }
}

/// Frontends (with their service's name) and services by name.
type View = (
    BTreeMap<(IpAddr, u16, u8), (String, String)>,
    BTreeMap<String, ServiceView>,
    Vec<String>,
);

fn view(snap: &Snapshot) -> View {
    let frontends = snap
        .frontends()
        .map(|f| {
            let s = snap.service(f.service);
            (
                (f.addr, f.port, f.proto as u8),
                (format!("{:?}", f.kind), s.name().to_string()),
            )
        })
        .collect();
    let services = snap
        .services()
        .iter()
        .map(|s| (s.name().to_string(), service_view(s)))
        .collect();
    let mut addrs: Vec<IpAddr> = VIPS
        .iter()
        .chain(&BACKENDS)
        .chain(&NEIGHBORS)
        .map(|a| ip(a))
        .collect();
    addrs.extend([
        ip("10.0.0.100"),
        ip("2001:db8::100"),
        ip("10.0.0.1"),
        ip("198.51.100.1"),
    ]);
    let addrs = addrs
        .into_iter()
        .map(|a| format!("{a}: {:?} {:?}", snap.owner_kind(a), snap.route(a)))
        .collect();
    (frontends, services, addrs)
}

/// The snapshot a node starting now would publish for `p`'s state.
fn from_scratch(p: &ControlPlane) -> Snapshot {
    let mut c = Compiler::new(node());
    c.set_neighbors(p.neighbors().to_vec());
    c.compile(p.state(), p.revision(), &Snapshot::empty(), None)
        .expect("a committed state compiles")
        .0
}

/// Live frontends' and backends' counter slots.
type Slots = (
    BTreeMap<(IpAddr, u16, u8), u32>,
    BTreeMap<(String, IpAddr, u16), u32>,
);

/// Every live object's counter slot, checked distinct.
fn slots(snap: &Snapshot) -> Slots {
    let fe: BTreeMap<_, _> = snap
        .frontends()
        .map(|f| ((f.addr, f.port, f.proto as u8), f.stats_slot))
        .collect();
    let be: BTreeMap<_, _> = snap
        .services()
        .iter()
        .flat_map(|s| {
            s.backends()
                .iter()
                .map(move |b| ((s.name().to_string(), b.addr, b.port), b.stats_slot))
        })
        .collect();
    assert_eq!(
        fe.values().collect::<HashSet<_>>().len(),
        fe.len(),
        "frontend slots distinct"
    );
    assert_eq!(
        be.values().collect::<HashSet<_>>().len(),
        be.len(),
        "backend slots distinct"
    );
    (fe, be)
}

/// The compiler's slot allocators hold exactly the live objects, at the
/// slots the snapshot gives them: a rejected or rolled-back transaction
/// leaked no slot.
fn allocated_slots_are_the_live_ones(p: &ControlPlane, live: &Slots, i: usize) {
    for v in VIPS {
        for port in [80, 443] {
            for (protocol, proto) in [(Protocol::Tcp, 6), (Protocol::Udp, 17)] {
                let key = FrontendKey {
                    addr: ip(v),
                    port,
                    protocol,
                };
                let want = live.0.get(&(key.addr, port, proto)).copied();
                assert_eq!(p.compiler.frontend_slot(&key), want, "op {i}: frontend {key}");
            }
        }
    }
    for s in SERVICES {
        for b in BACKENDS {
            for port in [8080, 9090] {
                let key = BackendKey {
                    service: s.to_string(),
                    addr: ip(b),
                    port,
                };
                let want = live.1.get(&(s.to_string(), key.addr, port)).copied();
                assert_eq!(p.compiler.backend_slot(&key), want, "op {i}: backend {key}");
            }
        }
    }
}

/// The state file and its journal, as far as they exist.
fn files(p: &ControlPlane) -> Option<[Option<Vec<u8>>; 2]> {
    p.state_file
        .as_ref()
        .map(|f| [std::fs::read(f.path()).ok(), std::fs::read(f.journal_path()).ok()])
}

/// What a history reached, for [`histories_reach_what_they_are_for`].
#[derive(Debug, Default)]
struct Reached {
    accepted: u32,
    rejected: u32,
    /// Accepted operations after which some service's IPv4 ring had a
    /// backend.
    filled: u32,
}

/// Runs `ops` on a plane with a state file, checking everything the
/// module doc lists after each.
fn run(ops: Vec<Op>) -> Reached {
    let mut reached = Reached::default();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let mut p = ControlPlane::open(node(), Some(&path)).unwrap();
    for (i, op) in ops.into_iter().enumerate() {
        let state = p.state().clone();
        let rev = p.revision();
        let snap = p.snapshot();
        let file = files(&p);
        let before = slots(&snap);
        let result = match op.clone() {
            Op::Apply(changes) => p.apply(Source::Api, changes, None).map(|_| ()),
            Op::Resync(s, f, b) => p.resync(Source::Config, s, f, b).map(|_| ()),
            Op::SetState(a, port, s, state) => p
                .set_backend_state(ip(BACKENDS[a]), port, s.map(|s| SERVICES[s]), state)
                .map(|_| ()),
            Op::Neighbors(n) => p.set_neighbors(
                n.into_iter()
                    .map(|(a, m)| (ip(NEIGHBORS[a]), [2, 0, 0, 0, 9, m]))
                    .collect(),
            ),
            Op::Reopen => {
                let neighbors = p.neighbors().to_vec();
                drop(p);
                p = ControlPlane::open(node(), Some(&path)).expect("reopens from its own state file");
                assert_eq!(
                    (p.state(), p.revision()),
                    (&state, rev),
                    "op {i}: the state file holds the state"
                );
                // Neighbors are runtime state: lbd sets them again.
                p.set_neighbors(neighbors).unwrap();
                Ok(())
            }
        };
        match result {
            Err(e) => {
                reached.rejected += 1;
                assert_eq!(p.state(), &state, "op {i} ({e}): state changed");
                assert_eq!(p.revision(), rev, "op {i} ({e}): revision changed");
                assert!(Arc::ptr_eq(&snap, &p.snapshot()), "op {i} ({e}): published");
                assert_eq!(files(&p), file, "op {i} ({e}): state file written");
            }
            Ok(()) => {
                reached.accepted += 1;
                let ring = |s: &Arc<SnapService>| {
                    let r = s.ring(Family::V4);
                    (0..r.size()).any(|i| r.slot(i).is_some())
                };
                if p.snapshot().services().iter().any(ring) {
                    reached.filled += 1;
                }
                if p.state() != &state {
                    assert_eq!(p.revision(), rev + 1, "op {i}: {op:?}");
                } else {
                    assert_eq!(p.revision(), rev, "op {i}: no change, no commit: {op:?}");
                }
                assert_eq!(p.published_revision(), p.revision());
                assert_eq!(p.snapshot().revision(), p.revision(), "op {i}");
            }
        }
        let now = p.snapshot();
        assert_eq!(
            view(&now),
            view(&from_scratch(&p)),
            "op {i} ({op:?}): incremental != from scratch"
        );
        let after = slots(&now);
        allocated_slots_are_the_live_ones(&p, &after, i);
        if !matches!(op, Op::Reopen) {
            for (k, s) in &before.0 {
                if let Some(t) = after.0.get(k) {
                    assert_eq!(s, t, "op {i}: frontend {k:?} changed slot");
                }
            }
            for (k, s) in &before.1 {
                if let Some(t) = after.1.get(k) {
                    assert_eq!(s, t, "op {i}: backend {k:?} changed slot");
                }
            }
        }
    }
    reached
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_histories_match_a_fresh_compile_and_rejections_change_nothing(
        ops in prop::collection::vec(op(), 1..40)
    ) {
        run(ops);
    }
}

/// The generators reach what the properties are about: over a fixed set
/// of histories, operations are accepted and rejected, and services have
/// backends in their rings.
#[test]
fn histories_reach_what_they_are_for() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut total = Reached::default();
    for _ in 0..24 {
        let ops = prop::collection::vec(op(), 30..40)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let r = run(ops);
        total.accepted += r.accepted;
        total.rejected += r.rejected;
        total.filled += r.filled;
    }
    eprintln!("{total:?}");
    assert!(
        total.accepted > 100 && total.rejected > 100 && total.filled > 50,
        "{total:?}"
    );
}
