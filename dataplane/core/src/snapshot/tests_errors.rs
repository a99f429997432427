//! One test per group of `BuildError` variants: each bad input is refused
//! with the right variant, and messages name the object and the field.

use std::net::IpAddr;

use super::tests::{add_service, base, be, cidr, fe, ip, GMAC, MAC0, MAC1, NMAC};
use super::*;
use crate::maglev::MAX_BACKENDS;

fn err(f: impl FnOnce(&mut SnapshotBuilder<'_>) -> Result<(), BuildError>) -> BuildError {
    let mut b = base();
    match f(&mut b) {
        Err(e) => e,
        Ok(()) => b.build().expect_err("expected a build error"),
    }
}

#[test]
fn service_errors() {
    for bad in [
        "web",
        "/web",
        "default/",
        "Default/web",
        "default/web/x",
        "-a/web",
        "a/web-",
        "a/w_b",
    ] {
        let e = err(|b| b.service(ServiceSpec::new(bad)).map(drop));
        assert!(matches!(e, BuildError::ServiceName { .. }), "{bad}: {e}");
        assert!(e.to_string().contains("field name"), "{e}");
    }
    let long = format!("default/{}", "a".repeat(64));
    assert!(matches!(
        err(|b| b.service(ServiceSpec::new(long)).map(drop)),
        BuildError::ServiceName { .. }
    ));
    let ok = format!("{}/{}", "a".repeat(63), "0-9");
    assert!(base().service(ServiceSpec::new(ok)).is_ok());

    let e = err(|b| {
        b.service(ServiceSpec::new("default/web"))?;
        b.service(ServiceSpec::new("default/web")).map(drop)
    });
    assert_eq!(
        e,
        BuildError::DuplicateService {
            name: "default/web".into()
        }
    );

    let e = err(|b| b.frontend(ServiceId(3), fe("192.0.2.1", 80, Proto::Tcp)));
    assert_eq!(e, BuildError::UnknownService { id: 3 });
    let e = err(|b| b.backend(ServiceId(0), be("10.1.0.1", 80)));
    assert_eq!(e, BuildError::UnknownService { id: 0 });
}

#[test]
fn frontend_errors() {
    let e = err(|b| {
        let a = b.service(ServiceSpec::new("default/a"))?;
        let c = b.service(ServiceSpec::new("default/c"))?;
        b.frontend(a, fe("192.0.2.1", 80, Proto::Tcp))?;
        b.frontend(c, fe("192.0.2.1", 80, Proto::Tcp))
    });
    assert!(matches!(e, BuildError::DuplicateFrontend { .. }));
    assert_eq!(
        e.to_string(),
        "frontend 192.0.2.1:80/tcp: claimed by service default/a and by service default/c"
    );
    let e = err(|b| {
        let a = b.service(ServiceSpec::new("default/a"))?;
        b.frontend(a, fe("2001:db8::9", 80, Proto::Udp))?;
        b.frontend(a, fe("2001:db8::9", 80, Proto::Udp))
    });
    assert!(e.to_string().contains("[2001:db8::9]:80/udp"), "{e}");

    let one = |spec: FrontendSpec| {
        err(move |b| {
            let a = b.service(ServiceSpec::new("default/a"))?;
            b.frontend(a, spec)
        })
    };
    let e = one(fe("192.0.2.1", 0, Proto::Tcp));
    assert!(matches!(e, BuildError::FrontendPortZero { .. }));
    assert!(e.to_string().contains("field port"), "{e}");
    for p in [Proto::Icmp, Proto::Icmpv6] {
        let e = one(fe("192.0.2.1", 80, p));
        assert!(matches!(e, BuildError::UnsupportedProtocol { .. }), "{e}");
        assert!(e.to_string().contains("field proto"), "{e}");
    }
    // Not one host's address: nothing could reach it.
    for a in [
        "0.0.0.0",
        "0.1.2.3",
        "127.0.0.1",
        "255.255.255.255",
        "224.0.0.1",
        "::",
        "::1",
        "::ffff:192.0.2.1",
        "ff02::1",
    ] {
        assert!(
            matches!(one(fe(a, 80, Proto::Tcp)), BuildError::FrontendAddress { .. }),
            "{a}"
        );
    }
    let e = one(FrontendSpec {
        stats_slot: Some(MAX_STATS_SLOT + 1),
        ..fe("192.0.2.1", 80, Proto::Tcp)
    });
    assert!(matches!(e, BuildError::StatsSlotTooLarge { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("frontend 192.0.2.1:80/tcp: field stats_slot"),
        "{e}"
    );
}

#[test]
fn source_range_family_and_snat_errors() {
    let e = err(|b| {
        let mut spec = ServiceSpec::new("default/a");
        spec.source_ranges = vec![cidr("10.0.0.0/8")];
        let a = b.service(spec)?;
        b.frontend(a, fe("192.0.2.1", 80, Proto::Tcp))?;
        b.frontend(a, fe("2001:db8:1::1", 80, Proto::Tcp))
    });
    assert!(
        matches!(e, BuildError::SourceRangeFamily { family: "IPv6", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("field source_ranges"), "{e}");

    // Full-NAT with no IPv6 SNAT address.
    let mut b = SnapshotBuilder::new(1);
    b.snat_address(ip("10.0.0.100"));
    let mut spec = ServiceSpec::new("default/a");
    spec.mode = ForwardMode::FullNat;
    let a = b.service(spec).unwrap();
    b.frontend(a, fe("192.0.2.1", 80, Proto::Tcp)).unwrap();
    b.frontend(a, fe("2001:db8:1::1", 80, Proto::Tcp)).unwrap();
    let e = b.build().unwrap_err();
    assert!(
        matches!(e, BuildError::NoSnatAddress { family: "IPv6", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("default/a"), "{e}");

    // Several frontends without SNAT: always the lowest is named, whatever
    // the order of the builder's maps.
    for _ in 0..32 {
        let mut b = SnapshotBuilder::new(1);
        let mut spec = ServiceSpec::new("default/a");
        spec.mode = ForwardMode::FullNat;
        let a = b.service(spec).unwrap();
        for i in (1..=16).rev() {
            b.frontend(a, fe(&format!("192.0.2.{i}"), 80, Proto::Tcp))
                .unwrap();
        }
        match b.build().unwrap_err() {
            BuildError::NoSnatAddress { frontend, .. } => assert_eq!(frontend, "192.0.2.1:80/tcp"),
            e => panic!("{e}"),
        }
    }

    let e = err(|b| {
        let a = b.service(ServiceSpec::new("default/a"))?;
        b.frontend(a, fe("10.0.0.100", 80, Proto::Tcp))
    });
    assert_eq!(
        e,
        BuildError::SnatIsVip {
            addr: ip("10.0.0.100")
        }
    );
    for a in [
        "0.0.0.0",
        "0.1.2.3",
        "127.0.0.1",
        "224.0.0.1",
        "ff02::1",
        "::1",
        "::ffff:10.0.0.1",
    ] {
        let e = err(|b| {
            b.snat_address(ip(a));
            Ok(())
        });
        assert_eq!(e, BuildError::SnatAddress { addr: ip(a) });
    }
    let e = err(|b| {
        for i in 0..=crate::flow::SnatPorts::MAX_ADDRESSES as u32 {
            b.snat_address(IpAddr::V4((0x0a09_0000 + i).into()));
        }
        Ok(())
    });
    assert!(matches!(e, BuildError::TooManySnatAddresses { .. }), "{e}");
    // The limit is on both families together, as a worker's `SnatPorts`
    // takes them, and duplicates count once.
    let max = crate::flow::SnatPorts::MAX_ADDRESSES as u32;
    // `base()` has one SNAT address of each family: `max - 2` more distinct
    // addresses, `v6` of them IPv6, the IPv4 ones given twice with `dups`.
    fn mixed(b: &mut SnapshotBuilder<'_>, max: u32, v6: u32, dups: bool) {
        for i in 0..max - 2 - v6 {
            for _ in 0..if dups { 2 } else { 1 } {
                b.snat_address(IpAddr::V4((0x0a09_0000 + i).into()));
            }
        }
        for i in 0..v6 {
            b.snat_address(IpAddr::V6((0xfd00_u128 << 112 | u128::from(i)).into()));
        }
    }
    let mut b = base();
    mixed(&mut b, max, 10, true);
    b.build().expect("64 distinct addresses, some given twice");
    let e = err(|b| {
        mixed(b, max, 10, false);
        b.snat_address(ip("fd00::ffff"));
        Ok(())
    });
    assert_eq!(
        e,
        BuildError::TooManySnatAddresses {
            count: max as usize + 1,
            max: max as usize
        }
    );
}

#[test]
fn backend_errors() {
    let one = |spec: BackendSpec| {
        err(move |b| {
            let a = b.service(ServiceSpec::new("default/a"))?;
            b.backend(a, spec)
        })
    };
    let e = one(be("10.1.0.1", 0));
    assert!(
        matches!(e, BuildError::BackendPortZero { .. }) && e.to_string().contains("field port"),
        "{e}"
    );
    for a in ["0.0.0.0", "239.1.1.1", "::", "ff05::2"] {
        assert!(matches!(one(be(a, 80)), BuildError::BackendAddress { .. }), "{a}");
    }
    // Loopback, or an address lbd owns (an interface's, a VIP, SNAT): lbd
    // has no host stack and would send it to itself.
    for (a, what) in [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "own addresses"),
        ("2001:db8::1", "own addresses"),
        ("10.0.0.100", "own addresses"),
        ("192.0.2.10", "own addresses"),
    ] {
        let e = err(|b| {
            let s = b.service(ServiceSpec::new("default/a"))?;
            b.frontend(s, fe("192.0.2.10", 80, Proto::Tcp))?;
            b.backend(s, be(a, 8080))
        });
        assert!(
            matches!(e, BuildError::BackendIsLocal { .. })
                && e.to_string()
                    .contains(&format!("service default/a backend {a}:8080: field addr: "))
                && e.to_string().contains(what),
            "{a}: {e}"
        );
    }
    // The broadcast address of the port's prefix (10.0.0.1/24) names all
    // of its hosts: refused as a backend, a frontend and an SNAT address.
    // Its network address, and .255 of a prefix lbd has no port on, are
    // hosts.
    let e = one(be("10.0.0.255", 8080));
    assert!(
        matches!(e, BuildError::BackendIsLocal { .. })
            && e.to_string()
                .contains("backend 10.0.0.255:8080: field addr: the broadcast address of a prefix"),
        "{e}"
    );
    let e = err(|b| {
        let s = b.service(ServiceSpec::new("default/a"))?;
        b.frontend(s, fe("10.0.0.255", 80, Proto::Tcp)).map(drop)
    });
    assert_eq!(
        e,
        BuildError::FrontendIsBroadcast {
            service: "default/a".into(),
            frontend: "10.0.0.255:80/tcp".into()
        }
    );
    assert!(e.to_string().contains("field addr: the broadcast address"), "{e}");
    let e = err(|b| {
        b.snat_address(ip("10.0.0.255"));
        Ok(())
    });
    assert_eq!(
        e,
        BuildError::SnatIsBroadcast {
            addr: ip("10.0.0.255")
        }
    );
    let mut b = base();
    let s = b.service(ServiceSpec::new("default/a")).unwrap();
    b.frontend(s, fe("10.9.0.255", 80, Proto::Tcp)).unwrap();
    b.backend(s, be("10.0.0.0", 8080)).unwrap();
    b.backend(s, be("10.1.0.255", 8080)).unwrap();
    b.snat_address(ip("10.8.0.255"));
    let snap = b.build().expect("hosts");
    assert!(snap.is_directed_broadcast(ip("10.0.0.255")));
    assert!(!snap.is_directed_broadcast(ip("10.1.0.255")));

    let e = one(BackendSpec {
        weight: MAX_WEIGHT + 1,
        ..be("10.1.0.1", 80)
    });
    assert!(
        matches!(e, BuildError::BackendWeight { .. }) && e.to_string().contains("field weight"),
        "{e}"
    );
    let e = one(BackendSpec {
        stats_slot: Some(u32::MAX),
        ..be("10.1.0.1", 80)
    });
    assert!(
        e.to_string().contains("backend 10.1.0.1:80: field stats_slot"),
        "{e}"
    );

    let e = err(|b| {
        let a = b.service(ServiceSpec::new("default/a"))?;
        b.backend(a, be("10.1.0.1", 80))?;
        b.backend(a, be("10.1.0.2", 80))?;
        b.backend(
            a,
            BackendSpec {
                state: BackendState::Terminating,
                ..be("10.1.0.1", 80)
            },
        )
    });
    assert_eq!(
        e,
        BuildError::DuplicateBackend {
            service: "default/a".into(),
            addr: ip("10.1.0.1"),
            port: 80
        }
    );
    // The same address in two services is fine.
    let mut b = base();
    add_service(&mut b, "default/a", "192.0.2.1", 2);
    add_service(&mut b, "default/b", "192.0.2.2", 2);
    b.build().unwrap();

    let e = err(|b| {
        let a = b.service(ServiceSpec::new("default/a"))?;
        for i in 0..=MAX_BACKENDS as u32 {
            b.backend(a, BackendSpec::new(IpAddr::V4((0x0a00_0000 + i).into()), 80))?;
        }
        Ok(())
    });
    assert!(matches!(e, BuildError::TooManyBackends { .. }), "{e}");

    // 10 active backends cannot fit a 7-slot ring.
    let e = err(|b| {
        b.max_ring_size(7);
        add_service(b, "default/a", "192.0.2.1", 10);
        Ok(())
    });
    assert!(matches!(e, BuildError::Maglev { .. }), "{e}");
    assert!(e.to_string().starts_with("service default/a: Maglev ring"), "{e}");
}

#[test]
fn interface_and_neighbor_errors() {
    let e = err(|b| {
        b.interface(MAX_PORTS, MAC0, cidr("10.9.0.1/24"), None);
        Ok(())
    });
    assert!(matches!(e, BuildError::PortOutOfRange { .. }), "{e}");
    for mac in [[0; 6], [1, 0, 0, 0, 0, 1], [0xff; 6]] {
        let e = err(|b| {
            b.interface(1, mac, cidr("10.9.0.1/24"), None);
            Ok(())
        });
        assert!(matches!(e, BuildError::InterfaceMac { port: 1, .. }), "{e}");
    }
    let e = err(|b| {
        b.interface(0, MAC1, cidr("10.9.0.1/24"), None);
        Ok(())
    });
    assert!(
        matches!(e, BuildError::InterfaceMacConflict { port: 0, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("02:00:00:00:00:01"), "{e}");
    for c in [
        "0.0.0.0/0",
        "0.1.2.3/8",
        "127.0.0.2/8",
        "::1/128",
        "::ffff:10.9.0.1/120",
    ] {
        let e = err(|b| {
            b.interface(1, MAC1, cidr(c), None);
            Ok(())
        });
        assert!(
            matches!(e, BuildError::InterfaceAddress { port: 1, .. }),
            "{c}: {e}"
        );
    }
    let e = err(|b| {
        b.interface(1, MAC1, cidr("10.9.0.1/24"), Some(ip("10.8.0.1")));
        Ok(())
    });
    assert_eq!(
        e,
        BuildError::GatewayNotConnected {
            port: 1,
            gateway: ip("10.8.0.1")
        }
    );
    let e = err(|b| {
        b.interface(0, MAC0, cidr("10.0.0.1/24"), Some(ip("10.0.0.253")));
        Ok(())
    });
    assert!(matches!(e, BuildError::GatewayConflict { port: 0, .. }), "{e}");
    // Gateways no ARP could resolve: lbd's own addresses, a prefix's
    // network or broadcast address.
    for (port, cidr_s, gw) in [
        (1, "10.9.0.1/24", "10.9.0.1"),
        (1, "10.9.0.1/24", "10.9.0.0"),
        (1, "10.9.0.1/24", "10.9.0.255"),
        (1, "10.9.0.1/30", "10.9.0.3"),
    ] {
        let e = err(|b| {
            b.interface(port, MAC1, cidr(cidr_s), Some(ip(gw)));
            Ok(())
        });
        assert!(
            matches!(e, BuildError::GatewayUnusable { port: 1, gateway, .. } if gateway == ip(gw)),
            "{gw}: {e}"
        );
        assert!(e.to_string().starts_with("port 1: field gateway: "), "{e}");
    }
    // The SNAT address or a VIP as the gateway.
    for gw in ["10.0.0.100", "10.0.0.200"] {
        let e = err(|b| {
            b.interface(1, MAC1, cidr("10.0.0.2/24"), Some(ip(gw)));
            add_service(b, "default/web", "10.0.0.200", 1);
            Ok(())
        });
        assert!(
            matches!(e, BuildError::GatewayUnusable { port: 1, .. }),
            "{gw}: {e}"
        );
    }
    // /31 (RFC 3021) has no network or broadcast address.
    let mut b = base();
    b.interface(1, MAC1, cidr("10.9.0.0/31"), Some(ip("10.9.0.1")));
    b.build().unwrap();
    // Interface addresses that are their prefix's network or broadcast.
    for bad in ["10.9.0.0/24", "10.9.0.255/24"] {
        let e = err(|b| {
            b.interface(1, MAC1, cidr(bad), None);
            Ok(())
        });
        assert!(
            matches!(e, BuildError::InterfaceAddress { port: 1, .. }),
            "{bad}: {e}"
        );
    }
    let e = err(|b| {
        b.neighbor(ip("10.7.0.1"), NMAC);
        Ok(())
    });
    assert_eq!(e, BuildError::NeighborNotConnected { addr: ip("10.7.0.1") });
    let e = err(|b| {
        b.neighbor(ip("10.0.0.7"), NMAC).neighbor(ip("10.0.0.7"), GMAC);
        Ok(())
    });
    assert!(matches!(e, BuildError::NeighborConflict { .. }), "{e}");
    let e = err(|b| {
        b.neighbor(ip("10.0.0.7"), [0x01, 0, 0x5e, 0, 0, 1]);
        Ok(())
    });
    assert!(matches!(e, BuildError::NeighborMac { .. }), "{e}");
    // Same neighbor twice with the same MAC is merged.
    let mut b = base();
    b.neighbor(ip("10.0.0.7"), NMAC).neighbor(ip("10.0.0.7"), NMAC);
    b.build().unwrap();
}

#[test]
fn error_messages_name_object_and_field() {
    let e = BuildError::BackendWeight {
        service: "default/web".into(),
        addr: ip("10.1.0.1"),
        port: 8080,
        weight: 70000,
        max: MAX_WEIGHT,
    };
    assert_eq!(
        e.to_string(),
        "service default/web backend 10.1.0.1:8080: field weight: 70000 exceeds 65535"
    );
}
