//! Tests of the state file and of opening the plane: the base and its
//! journal (round trip, corruption, failed writes, rejected commits at a
//! restart), `open`/`open_with` with the config resync at open, and node
//! configurations refused at open, each error blaming the right culprit.

use std::fs;

use lb_dataplane::flow::Proto;

use super::tests::{be, bkey, fe, ip, node, rejected, svc, web};
use super::*;
use crate::model::Mode;

/// State files written before the operator's state existed load: the
/// field is absent, and written only when set.
#[test]
fn state_files_without_operator_state_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    fs::write(
        &path,
        r#"{"version":1,"revision":7,"state":{"services":[{"name":"default/web","mode":"fullnat","traffic_policy":"cluster","affinity_timeout_seconds":null,"source_ranges":[],"source":"config"}],"frontends":[],"backends":[{"key":{"service":"default/web","addr":"10.1.0.11","port":8080},"weight":1,"state":"maintenance","node":null,"zone":null,"source":"config"}]}}"#,
    )
    .unwrap();
    let p = ControlPlane::open(node(), Some(&path)).unwrap();
    let b = &p.state().backends[&bkey("default/web", "10.1.0.11", 8080)];
    assert_eq!(
        (p.revision(), b.state, b.operator_state),
        (7, BackendState::Maintenance, None)
    );
    let text = serde_json::to_string(p.state()).unwrap();
    assert!(!text.contains("operator_state"), "{text}");
}

#[test]
fn state_file_round_trip_corruption_and_failed_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    {
        let mut p = ControlPlane::open(node(), Some(&path)).unwrap();
        assert_eq!(p.revision(), 0, "missing file: empty state");
        p.apply(Source::K8s, web(), None).unwrap();
        p.set_backend_state(ip("10.1.0.2"), None, None, BackendState::Terminating)
            .unwrap();
    }
    let mut p = ControlPlane::open(node(), Some(&path)).unwrap();
    assert_eq!(p.revision(), 2);
    assert_eq!(p.published_revision(), 2);
    let b = &p.state().backends[&bkey("default/web", "10.1.0.2", 8080)];
    assert_eq!(
        (b.state, b.operator_state),
        (BackendState::Active, Some(BackendState::Terminating))
    );
    assert!(p.snapshot().lookup(ip("192.0.2.1"), 80, Proto::Tcp).is_some());

    // Revision 1 wrote the base, revision 2 a journal line.
    let journal = dir.path().join("state.json.journal");
    assert_eq!(fs::read_to_string(&journal).unwrap().lines().count(), 1);

    // A failed write rejects the commit and keeps the files: here the
    // journal cannot be appended to (a directory stands in its place).
    let aside = dir.path().join("journal.aside");
    fs::rename(&journal, &aside).unwrap();
    fs::create_dir(&journal).unwrap();
    let e = rejected(
        &mut p,
        vec![Change::DeleteService("default/web".into())],
        ErrorKind::Unavailable,
    );
    assert!(
        e.contains("state.json.journal") && e.contains("revision 3"),
        "{e}"
    );
    fs::remove_dir(&journal).unwrap();
    fs::rename(&aside, &journal).unwrap();
    // The next commit rewrites the base (the failed append could not be
    // cut off) and drops the journal.
    assert_eq!(
        p.apply(
            Source::Api,
            vec![Change::DeleteService("default/web".into())],
            None
        )
        .unwrap(),
        3
    );
    assert!(!journal.exists());
    drop(p);
    let p = ControlPlane::open(node(), Some(&path)).unwrap();
    assert_eq!((p.revision(), p.state().services.len()), (3, 0));
    drop(p);

    // Corrupt, unknown version, invalid content: errors naming the file.
    for (text, what) in [
        ("{\"version\":1,", "not a state file"),
        ("{\"version\":9,\"revision\":1,\"state\":{}}", "format version 9"),
        (
            "{\"version\":1,\"revision\":1,\"state\":{\"services\":[],\"frontends\":[{\"service\":\"a/b\",\"key\":{\"addr\":\"192.0.2.1\",\"port\":80,\"protocol\":\"tcp\"},\"kind\":\"load-balancer\",\"source\":\"api\"}],\"backends\":[]}}",
            "no service \"a/b\"",
        ),
        // The same frontend twice, under two services: one would be lost.
        (
            "{\"version\":1,\"revision\":1,\"state\":{\"services\":[],\"frontends\":[{\"service\":\"a/b\",\"key\":{\"addr\":\"192.0.2.1\",\"port\":80,\"protocol\":\"tcp\"},\"kind\":\"load-balancer\",\"source\":\"api\"},{\"service\":\"a/c\",\"key\":{\"addr\":\"192.0.2.1\",\"port\":80,\"protocol\":\"tcp\"},\"kind\":\"load-balancer\",\"source\":\"api\"}],\"backends\":[]}}",
            "frontend 192.0.2.1:80/tcp is listed twice",
        ),
    ] {
        fs::write(&path, text).unwrap();
        let e = ControlPlane::open(node(), Some(&path)).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, PlaneError::StateFile { .. }), "{msg}");
        assert!(msg.contains("state.json") && msg.contains(what), "{msg}");
        assert_eq!(fs::read_to_string(&path).unwrap(), text, "never replaced");
    }
}

/// A commit rejected after its journal line was written (the fdatasync
/// failed) and could not be cut off again is not applied at a restart:
/// the plane rewrites the base at the revision before it.
#[test]
fn a_rejected_commit_is_not_replayed_at_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let mut p = ControlPlane::open(node(), Some(&path)).unwrap();
    p.apply(Source::K8s, web(), None).unwrap();
    p.set_backend_state(ip("10.1.0.2"), None, None, BackendState::Terminating)
        .unwrap();
    p.state_file.as_mut().unwrap().inject_failures(true, true);
    rejected(
        &mut p,
        vec![Change::DeleteService("default/web".into())],
        ErrorKind::Unavailable,
    );
    drop(p);
    let p = ControlPlane::open(node(), Some(&path)).unwrap();
    assert_eq!((p.revision(), p.state().services.len()), (2, 1));
}

/// `open_with` refused, with the configuration's error (a `Validation`
/// naming its entry), not the state file's.
fn refused_by_config(node: NodeConfig, path: &std::path::Path, config: InitialResync) -> PlaneError {
    let e = ControlPlane::open_with(node, Some(path), Some(config)).unwrap_err();
    assert!(matches!(e, PlaneError::Validation(_)), "{e}");
    e
}

/// A node configuration that cannot work (an SNAT address nobody can own)
/// is its own error, not the state file's, with or without a file.
#[test]
fn a_bad_node_configuration_is_not_blamed_on_the_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    drop(ControlPlane::open(node(), Some(&path)).unwrap());
    let bad = NodeConfig {
        snat_addresses: vec![ip("224.0.0.1")],
        ..node()
    };
    for file in [None, Some(path.as_path())] {
        let e = ControlPlane::open(bad.clone(), file).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, PlaneError::NodeConfig(_)), "{msg}");
        assert!(
            msg.starts_with("node configuration: ") && msg.contains("224.0.0.1") && !msg.contains("state"),
            "{msg}"
        );
    }
}

/// A port whose interface entries disagree on tagging (the IPv4 entry on
/// VLAN 10, the IPv6 one untagged) is refused, whichever entry comes
/// first; the same VLAN on both is a tagged port.
#[test]
fn a_port_tagged_on_one_interface_entry_only_is_refused() {
    for tagged in [0, 1] {
        let mut n = node();
        n.interfaces[tagged].vlan = Some(10);
        let e = ControlPlane::open(n, None).unwrap_err();
        assert!(matches!(e, PlaneError::NodeConfig(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "node configuration: port 0: vlan: 10: another interface entry of the port has no VLAN"
        );
    }
    let mut n = node();
    n.interfaces[0].vlan = Some(10);
    n.interfaces[1].vlan = Some(10);
    let p = ControlPlane::open(n, None).unwrap();
    assert_eq!(p.snapshot().port(0).unwrap().vlan(), Some(10));
}

#[test]
fn a_state_that_does_not_compile_here_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let mut p = ControlPlane::open(node(), Some(&path)).unwrap();
    p.apply(Source::Api, web(), None).unwrap();
    drop(p);
    let mut other = node();
    other.snat_addresses.clear();
    let e = ControlPlane::open(other, Some(&path)).unwrap_err().to_string();
    assert!(e.contains("does not compile") && e.contains("SNAT"), "{e}");
}

/// lbd's config resync at start is applied before the loaded state is
/// compiled: config v1 has an SNAT address and a full-NAT service, v2
/// drops the address and makes the service DNAT. The state file alone
/// does not compile for v2, the state with v2's objects does.
#[test]
fn the_config_resync_at_open_comes_before_the_first_compile() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let config = |mode: Mode| InitialResync {
        source: Source::Config,
        services: vec![Service {
            mode,
            ..svc("default/web")
        }],
        frontends: vec![fe("default/web", "192.0.2.1", 80)],
        backends: vec![be("default/web", "10.1.0.1", 8080)],
    };
    let (p, out) = ControlPlane::open_with(node(), Some(&path), Some(config(Mode::FullNat))).unwrap();
    assert_eq!(out.unwrap().added, 3);
    assert_eq!(p.revision(), 1);
    drop(p);
    let v2 = NodeConfig {
        snat_addresses: vec![],
        ..node()
    };
    let files = || {
        (
            fs::read(&path).ok(),
            fs::read(dir.path().join("state.json.journal")).ok(),
        )
    };
    let before = files();
    // Still full-NAT: the resync changes nothing, but its own frontend
    // fails for v2, which dropped the SNAT address. The config's error,
    // naming its entry; the file is not blamed and is left as it was.
    let e = refused_by_config(v2.clone(), &path, config(Mode::FullNat));
    assert_eq!(
        e.to_string(),
        "frontends[0] frontend 192.0.2.1:80/tcp: address: service \"default/web\" is full-NAT, and this node has no IPv4 SNAT address"
    );
    assert_eq!(files(), before);
    // The state is fixed by v2, but v2 adds a full-NAT service of its own:
    // the config's error, naming its entry.
    let mut broken = config(Mode::Dnat);
    broken.services.push(svc("default/api"));
    broken.frontends.push(fe("default/api", "192.0.2.2", 80));
    let e = refused_by_config(v2.clone(), &path, broken);
    assert!(
        e.to_string().starts_with(
            "frontends[1] frontend 192.0.2.2:80/tcp: address: service \"default/api\" is full-NAT"
        ),
        "{e}"
    );
    assert_eq!(files(), before);

    let (p, out) = ControlPlane::open_with(v2.clone(), Some(&path), Some(config(Mode::Dnat))).unwrap();
    assert_eq!(
        out.unwrap(),
        ResyncOutcome {
            revision: 2,
            added: 0,
            updated: 1,
            removed: 0
        }
    );
    assert_eq!((p.revision(), p.published_revision()), (2, 2));
    assert_eq!(p.state().services["default/web"].mode, Mode::Dnat);
    let s = p.snapshot();
    assert_eq!(s.revision(), 2);
    assert!(s.lookup(ip("192.0.2.1"), 80, Proto::Tcp).is_some());
    drop(p);
    // Persisted: a restart with the same config changes nothing.
    let (p, out) = ControlPlane::open_with(v2.clone(), Some(&path), Some(config(Mode::Dnat))).unwrap();
    assert_eq!(out.unwrap().revision, 2);
    assert_eq!(p.revision(), 2);
    drop(p);
    // A resync that breaks a state that compiles is the resync's error,
    // named by its entry although the frontend itself did not change.
    let e = refused_by_config(v2, &path, config(Mode::FullNat));
    assert!(
        e.to_string().starts_with(
            "frontends[0] frontend 192.0.2.1:80/tcp: address: service \"default/web\" is full-NAT"
        ),
        "{e}"
    );
    assert_eq!(ControlPlane::open(node(), Some(&path)).unwrap().revision(), 2);
}

/// The config resync at open lists a DNAT and a full-NAT service, both
/// already in the state file; the node configuration then drops its SNAT
/// address. The resync changes nothing, yet the full-NAT service's
/// frontend fails: the node configuration with the config's own entry is
/// at fault, so the error names that entry (by its index, also for a
/// backend) and not the state file, which is left as it was.
#[test]
fn an_unchanged_config_object_failing_for_a_new_node_config_blames_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let config = || InitialResync {
        source: Source::Config,
        services: vec![
            Service {
                mode: Mode::Dnat,
                ..svc("default/dns")
            },
            svc("default/web"),
        ],
        frontends: vec![
            fe("default/dns", "192.0.2.53", 53),
            fe("default/web", "192.0.2.1", 80),
        ],
        backends: vec![
            be("default/dns", "10.1.0.53", 53),
            be("default/web", "10.1.0.1", 8080),
        ],
    };
    drop(ControlPlane::open_with(node(), Some(&path), Some(config())).unwrap());
    let before = fs::read(&path).unwrap();
    let v2 = NodeConfig {
        snat_addresses: vec![],
        ..node()
    };
    let e = refused_by_config(v2, &path, config());
    assert_eq!(e.kind(), ErrorKind::Precondition);
    assert_eq!(
        e.to_string(),
        "frontends[1] frontend 192.0.2.1:80/tcp: address: service \"default/web\" is full-NAT, and this node has no IPv4 SNAT address"
    );
    assert_eq!(fs::read(&path).unwrap(), before);

    // A backend listed unchanged fails for a new node configuration: the
    // new interface address is the backend's.
    let v3 = NodeConfig {
        interfaces: vec![InterfaceConfig {
            cidr: "10.1.0.1/16".parse().unwrap(),
            gateway: None,
            vlan: None,
            mtu: None,
            ..node().interfaces[0].clone()
        }],
        ..node()
    };
    let e = refused_by_config(v3, &path, config());
    assert!(
        e.to_string()
            .starts_with("backends[1] backend 10.1.0.1:8080 of default/web: address: 10.1.0.1 is one of lbd's own addresses"),
        "{e}"
    );
    // A new SNAT address at a listed VIP.
    let v4 = NodeConfig {
        snat_addresses: vec![ip("10.0.0.100"), ip("192.0.2.1")],
        ..node()
    };
    let e = refused_by_config(v4, &path, config());
    assert_eq!(
        e.to_string(),
        "frontends[1] frontend 192.0.2.1:80/tcp: address: 192.0.2.1 is one of this node's SNAT addresses"
    );
    assert_eq!(fs::read(&path).unwrap(), before);
}

/// A frontend an operator added to a config service fails with the node
/// configuration that makes the service impossible: the config service's
/// entry is named, not the state file.
#[test]
fn an_operators_frontend_of_a_config_service_blames_the_config_service() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let config = || InitialResync {
        source: Source::Config,
        services: vec![svc("default/web")],
        frontends: vec![],
        backends: vec![be("default/web", "10.1.0.1", 8080)],
    };
    let (mut p, _) = ControlPlane::open_with(node(), Some(&path), Some(config())).unwrap();
    p.apply(
        Source::Api,
        vec![Change::UpsertFrontend(fe("default/web", "192.0.2.9", 80))],
        None,
    )
    .unwrap();
    drop(p);
    let before = fs::read(&path).unwrap();
    let v2 = NodeConfig {
        snat_addresses: vec![],
        ..node()
    };
    let e = refused_by_config(v2, &path, config());
    assert_eq!(
        e.to_string(),
        "services[0] frontend 192.0.2.9:80/tcp: address: service \"default/web\" is full-NAT, and this node has no IPv4 SNAT address"
    );
    assert_eq!(fs::read(&path).unwrap(), before);
}

/// An object only the state file holds (an operator's full-NAT service)
/// that does not compile for the new node configuration is still the
/// state file's fault, whether the config resync changes nothing or
/// something else.
#[test]
fn a_state_file_object_failing_for_a_new_node_config_blames_the_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let config = |weight: u32| InitialResync {
        source: Source::Config,
        services: vec![Service {
            mode: Mode::Dnat,
            ..svc("default/dns")
        }],
        frontends: vec![fe("default/dns", "192.0.2.53", 53)],
        backends: vec![Backend {
            weight,
            ..be("default/dns", "10.1.0.53", 53)
        }],
    };
    let (mut p, _) = ControlPlane::open_with(node(), Some(&path), Some(config(1))).unwrap();
    p.apply(Source::Api, web(), None).unwrap();
    drop(p);
    let before = fs::read(&path).unwrap();
    let v2 = NodeConfig {
        snat_addresses: vec![],
        ..node()
    };
    let file = path.display();
    let e = ControlPlane::open_with(v2.clone(), Some(&path), Some(config(1))).unwrap_err();
    assert!(matches!(e, PlaneError::StateFile { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!("state file {file}: state does not compile for this node: frontend 192.0.2.1:80/tcp: address: service \"default/web\" is full-NAT, and this node has no IPv4 SNAT address")
    );
    let e = ControlPlane::open_with(v2, Some(&path), Some(config(2))).unwrap_err();
    assert!(matches!(e, PlaneError::StateFile { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!("state file {file}: state does not compile for this node, even with the config source's objects replaced: frontend 192.0.2.1:80/tcp: address: service \"default/web\" is full-NAT, and this node has no IPv4 SNAT address")
    );
    assert_eq!(fs::read(&path).unwrap(), before);
}
