//! The snapshot and worker fixtures shared by the pipeline's integration
//! tests (golden packets, allocation count, corpus replay) and the fuzz
//! targets. Only the public API of `lb_dataplane` is used.

#![allow(dead_code)]

use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::OnceLock;
use std::time::Duration;

use lb_dataplane::affinity::{self, AffinityTable};
use lb_dataplane::conntrack;
use lb_dataplane::flow::{Proto, WorkerId};
use lb_dataplane::snapshot::{
    BackendSpec, BackendState, Cidr, ForwardMode, FrontendKind, FrontendSpec, ServiceSpec, SessionAffinity,
    SnapshotBuilder,
};
use lb_dataplane::worker::{Worker, WorkerConfig};
use lb_dataplane::Snapshot;

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("bad address {s}: {e}"))
}

pub const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
pub const MAC1: [u8; 6] = [2, 0, 0, 0, 0, 0x11];
pub const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xc1];
pub const BACKEND_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xb1];
pub const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xee];
pub const BROADCAST: [u8; 6] = [0xff; 6];

pub const C4: &str = "10.0.0.2";
pub const C6: &str = "fd00::2";
pub const SNAT4: &str = "10.1.0.100";
pub const SNAT6: &str = "fd01::100";
pub const ROUTER4: &str = "10.1.0.254";
pub const ROUTER6: &str = "fd01::fe";
/// The first SNAT port of a fresh worker 0 (see the module doc).
pub const SNAT_PORT: u16 = 20000;

/// The snapshot fixtures, by name.
#[derive(Debug, Clone, Copy)]
pub enum Fixture {
    /// Port 0 (clients): MAC0, 10.0.0.1/24 (gateway 10.0.0.254), fd00::1/64.
    /// Port 1 (backends): MAC1, 10.1.0.1/24, fd01::1/64.
    /// SNAT 10.1.0.100 and fd01::100. Neighbors: clients 10.0.0.2, fd00::2
    /// (CLIENT_MAC); backends 10.1.0.11-13, fd01::11-13 (BACKEND_MAC).
    ///
    /// | service      | mode     | frontend            | backends                  |
    /// |--------------|----------|---------------------|---------------------------|
    /// | web          | full-NAT | TCP 10.0.0.100:80   | 10.1.0.11:8080            |
    /// | web6         | full-NAT | TCP [fd00::100]:80  | [fd01::11]:8080           |
    /// | app          | DNAT     | TCP 10.0.0.101:80   | 10.1.0.12:8080            |
    /// | app6         | DNAT     | TCP [fd00::101]:80  | [fd01::12]:8080           |
    /// | dns          | DNAT     | UDP 10.0.0.102:53   | 10.1.0.13:5353            |
    /// | dns6         | DNAT     | UDP [fd00::102]:53  | [fd01::13]:5353           |
    /// | syslog       | full-NAT | UDP 10.0.0.103:514  | 10.1.0.11:5514            |
    /// | syslog6      | full-NAT | UDP [fd00::103]:514 | [fd01::11]:5514           |
    /// | drain        | DNAT     | TCP 10.0.0.104:80   | 10.1.0.11:80 terminating  |
    /// | drain6       | DNAT     | TCP [fd00::104]:80  | [fd01::11]:80 terminating |
    /// | restricted   | DNAT     | TCP 10.0.0.105:80, source 192.168.0.0/16 | 10.1.0.11:80 |
    /// | restricted6  | DNAT     | TCP [fd00::105]:80, source fd99::/16     | [fd01::11]:80 |
    /// | pool         | full-NAT | TCP 10.0.0.106:80   | 10.1.0.11-13:9000         |
    /// | sticky       | DNAT     | TCP 10.0.0.107:80, client-IP affinity 3h | 10.1.0.11-13:7000 |
    /// | sticky6      | DNAT     | TCP [fd00::107]:80, client-IP affinity 3h | [fd01::11-13]:7000 |
    TwoPort,
    /// `TwoPort` with an empty neighbor table (`Snapshot::with_neighbors`):
    /// every next hop, clients, backends and the gateway, is unresolved.
    NoNeighbors,
    /// `TwoPort` on VLAN trunks: port 0 on VLAN 10, port 1 on VLAN 20
    /// (`SnapshotBuilder::vlan`); frames must carry their port's id. Its
    /// ports' MTUs are 1,400 and 1,280 (`SnapshotBuilder::mtu`), so fuzzed
    /// frames reach the answers to packets too big for their egress port.
    Tagged,
}

impl Fixture {
    pub fn snapshot(self) -> &'static Snapshot {
        static TWO_PORT: OnceLock<Snapshot> = OnceLock::new();
        static NO_NEIGHBORS: OnceLock<Snapshot> = OnceLock::new();
        static TAGGED: OnceLock<Snapshot> = OnceLock::new();
        match self {
            Fixture::TwoPort => TWO_PORT.get_or_init(|| two_port_with(false)),
            Fixture::Tagged => TAGGED.get_or_init(|| two_port_with(true)),
            Fixture::NoNeighbors => NO_NEIGHBORS.get_or_init(|| {
                two_port_with(false)
                    .with_neighbors(&[])
                    .expect("an empty neighbor set is valid")
            }),
        }
    }
}

pub fn cidr(s: &str, prefix: u8) -> Cidr {
    Cidr::new(ip(s), prefix).unwrap()
}

/// [`Fixture::TwoPort`], its ports tagged (VLAN 10 and 20) and of MTU
/// 1,400 and 1,280 if `vlans`.
pub fn two_port_with(vlans: bool) -> Snapshot {
    let mut b = SnapshotBuilder::new(1);
    b.interface(0, MAC0, cidr("10.0.0.1", 24), Some(ip("10.0.0.254")));
    b.interface(0, MAC0, cidr("fd00::1", 64), None);
    b.interface(1, MAC1, cidr("10.1.0.1", 24), None);
    b.interface(1, MAC1, cidr("fd01::1", 64), None);
    b.snat_address(ip(SNAT4)).snat_address(ip(SNAT6));
    for c in [C4, C6, "10.0.0.254"] {
        b.neighbor(ip(c), CLIENT_MAC);
    }
    for i in 11..=13 {
        b.neighbor(ip(&format!("10.1.0.{i}")), BACKEND_MAC);
        b.neighbor(ip(&format!("fd01::{i}")), BACKEND_MAC);
    }
    type Svc<'a> = (
        &'a str,
        ForwardMode,
        &'a str,
        u16,
        Proto,
        &'a [(&'a str, u16)],
        BackendState,
        Option<Cidr>,
    );
    let (dn, fnat, tcp, udp, act) = (
        ForwardMode::Dnat,
        ForwardMode::FullNat,
        Proto::Tcp,
        Proto::Udp,
        BackendState::Active,
    );
    let services: &[Svc] = &[
        (
            "web",
            fnat,
            "10.0.0.100",
            80,
            tcp,
            &[("10.1.0.11", 8080)],
            act,
            None,
        ),
        (
            "web6",
            fnat,
            "fd00::100",
            80,
            tcp,
            &[("fd01::11", 8080)],
            act,
            None,
        ),
        (
            "app",
            dn,
            "10.0.0.101",
            80,
            tcp,
            &[("10.1.0.12", 8080)],
            act,
            None,
        ),
        ("app6", dn, "fd00::101", 80, tcp, &[("fd01::12", 8080)], act, None),
        (
            "dns",
            dn,
            "10.0.0.102",
            53,
            udp,
            &[("10.1.0.13", 5353)],
            act,
            None,
        ),
        ("dns6", dn, "fd00::102", 53, udp, &[("fd01::13", 5353)], act, None),
        (
            "syslog",
            fnat,
            "10.0.0.103",
            514,
            udp,
            &[("10.1.0.11", 5514)],
            act,
            None,
        ),
        (
            "syslog6",
            fnat,
            "fd00::103",
            514,
            udp,
            &[("fd01::11", 5514)],
            act,
            None,
        ),
        (
            "drain",
            dn,
            "10.0.0.104",
            80,
            tcp,
            &[("10.1.0.11", 80)],
            BackendState::Terminating,
            None,
        ),
        (
            "drain6",
            dn,
            "fd00::104",
            80,
            tcp,
            &[("fd01::11", 80)],
            BackendState::Terminating,
            None,
        ),
        (
            "restricted",
            dn,
            "10.0.0.105",
            80,
            tcp,
            &[("10.1.0.11", 80)],
            act,
            Some(cidr("192.168.0.0", 16)),
        ),
        (
            "restricted6",
            dn,
            "fd00::105",
            80,
            tcp,
            &[("fd01::11", 80)],
            act,
            Some(cidr("fd99::", 16)),
        ),
        (
            "pool",
            fnat,
            "10.0.0.106",
            80,
            tcp,
            &[("10.1.0.11", 9000), ("10.1.0.12", 9000), ("10.1.0.13", 9000)],
            act,
            None,
        ),
    ];
    for &(name, mode, vip, port, proto, backends, state, range) in services {
        let mut spec = ServiceSpec::new(format!("golden/{name}"));
        spec.mode = mode;
        spec.source_ranges = range.into_iter().collect();
        let id = b.service(spec).unwrap();
        b.frontend(
            id,
            FrontendSpec::new(ip(vip), port, proto, FrontendKind::LoadBalancer),
        )
        .unwrap();
        for &(addr, bport) in backends {
            let mut be = BackendSpec::new(ip(addr), bport);
            be.state = state;
            b.backend(id, be).unwrap();
        }
    }
    for (name, vip, be) in [
        ("sticky", "10.0.0.107", "10.1.0."),
        ("sticky6", "fd00::107", "fd01::"),
    ] {
        let mut spec = ServiceSpec::new(format!("golden/{name}"));
        spec.mode = dn;
        spec.affinity = SessionAffinity::ClientIp {
            timeout: Duration::from_secs(3 * 3600),
        };
        let id = b.service(spec).unwrap();
        b.frontend(
            id,
            FrontendSpec::new(ip(vip), 80, tcp, FrontendKind::LoadBalancer),
        )
        .unwrap();
        for i in 11..=13 {
            b.backend(id, BackendSpec::new(ip(&format!("{be}{i}")), 7000))
                .unwrap();
        }
    }
    if vlans {
        b.vlan(0, 10).vlan(1, 20).mtu(0, 1400).mtu(1, 1280);
    }
    b.build().unwrap()
}

/// How the case's worker is built.
#[derive(Debug, Clone)]
pub struct Setup {
    pub n_workers: u16,
    pub id: u16,
    pub conntrack_v4: u32,
    pub conntrack_v6: u32,
    pub snat_ports: RangeInclusive<u16>,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            n_workers: 1,
            id: 0,
            conntrack_v4: 64,
            conntrack_v6: 64,
            snat_ports: 20000..=20999,
        }
    }
}

impl Setup {
    pub fn worker(&self) -> Worker {
        let mut cfg = WorkerConfig::new(WorkerId(self.id), self.n_workers);
        cfg.conntrack = conntrack::Config::new(self.conntrack_v4, self.conntrack_v6);
        cfg.snat_addresses = vec![ip(SNAT4), ip(SNAT6)];
        cfg.snat_ports = self.snat_ports.clone();
        cfg.frontend_slots = 64;
        cfg.backend_slots = 64;
        let pins = AffinityTable::new(affinity::MIN_CAPACITY, 1).unwrap();
        cfg.affinity = Some(std::sync::Arc::new(pins));
        Worker::new(cfg).unwrap()
    }
}
