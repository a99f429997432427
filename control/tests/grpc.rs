//! The gRPC service end to end: a real ControlPlane with a state file,
//! served on a temporary unix socket, called through tonic clients.

mod common;

use std::sync::atomic::Ordering;

use common::Server;
use lb_proto::v1 as pb;
use pb::change::Change as C;
use pb::load_balancer_client::LoadBalancerClient;
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

async fn channel(s: &Server) -> Channel {
    Endpoint::from_shared(format!("unix:{}", s.socket.display()))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn client(s: &Server) -> LoadBalancerClient<Channel> {
    LoadBalancerClient::new(channel(s).await)
}

fn service(name: &str) -> pb::Service {
    pb::Service {
        name: name.into(),
        ..Default::default()
    }
}

fn frontend(service: &str, addr: &str, port: u32) -> pb::Frontend {
    pb::Frontend {
        service: service.into(),
        address: addr.into(),
        port,
        protocol: pb::Protocol::Tcp.into(),
        ..Default::default()
    }
}

fn backend(service: &str, addr: &str, port: u32) -> pb::Backend {
    pb::Backend {
        service: service.into(),
        address: addr.into(),
        port,
        ..Default::default()
    }
}

fn up(c: C) -> pb::Change {
    pb::Change { change: Some(c) }
}

fn web_changes() -> Vec<pb::Change> {
    vec![
        up(C::UpsertService(service("default/web"))),
        up(C::UpsertFrontend(frontend("default/web", "10.0.0.100", 80))),
        up(C::UpsertBackend(backend("default/web", "10.1.0.11", 8080))),
        up(C::UpsertBackend(backend("default/web", "10.1.0.12", 8080))),
    ]
}

fn apply_req(changes: Vec<pb::Change>) -> pb::ApplyRequest {
    pb::ApplyRequest {
        changes,
        source: 0,
        expected_revision: 0,
    }
}

/// Asserts a call failed with `code`, its message mentions every `words`,
/// and the plane's state and revision did not move.
async fn rejected<T: std::fmt::Debug>(
    s: &Server,
    code: Code,
    words: &[&str],
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) {
    let (rev, state) = (s.revision(), s.state());
    let status = call.await.expect_err("call should fail");
    assert_eq!(status.code(), code, "{status:?}");
    for w in words {
        assert!(status.message().contains(w), "{:?} lacks {w:?}", status.message());
    }
    assert_eq!(s.revision(), rev, "revision moved");
    assert_eq!(s.state(), state, "state changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_get_list_and_optimistic_concurrency() {
    let s = Server::start();
    let mut c = client(&s).await;
    let r = c.apply(apply_req(web_changes())).await.unwrap().into_inner();
    assert_eq!(r.revision, 1);
    let r2 = c
        .apply(pb::ApplyRequest {
            changes: vec![
                up(C::UpsertService(service("kube-system/dns"))),
                up(C::UpsertFrontend(pb::Frontend {
                    protocol: pb::Protocol::Udp.into(),
                    ..frontend("kube-system/dns", "10.0.0.53", 53)
                })),
                up(C::UpsertBackend(backend("kube-system/dns", "10.1.0.11", 53))),
            ],
            source: pb::Source::K8s.into(),
            expected_revision: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r2.revision, 2);

    let g = c
        .get_service(pb::GetServiceRequest {
            name: "default/web".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let svc = g.service.unwrap();
    assert_eq!(svc.source, i32::from(pb::Source::Api));
    assert_eq!(svc.mode, i32::from(pb::ForwardingMode::Fullnat));
    assert_eq!(g.frontends.len(), 1);
    assert_eq!(g.backends.len(), 2);
    assert_eq!(g.backends[0].weight, Some(1));
    assert_eq!(g.backends[0].state, i32::from(pb::BackendState::Active));
    assert_eq!(g.revision, 2);

    let list = |service: &str, source: pb::Source, address: &str| pb::ListRequest {
        service: service.into(),
        source: source.into(),
        address: address.into(),
    };
    let all = c
        .list(list("", pb::Source::Unspecified, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            all.services.len(),
            all.frontends.len(),
            all.backends.len(),
            all.revision
        ),
        (2, 2, 3, 2)
    );
    let dns = c
        .list(list("kube-system/dns", pb::Source::Unspecified, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (dns.services.len(), dns.frontends.len(), dns.backends.len()),
        (1, 1, 1)
    );
    assert_eq!(dns.services[0].source, i32::from(pb::Source::K8s));
    let k8s = c.list(list("", pb::Source::K8s, "")).await.unwrap().into_inner();
    assert_eq!(k8s.services.len(), 1);
    assert!(k8s.backends.iter().all(|b| b.service == "kube-system/dns"));
    let api = c.list(list("", pb::Source::Api, "")).await.unwrap().into_inner();
    assert_eq!((api.services.len(), api.backends.len()), (1, 2));
    let at = c
        .list(list("", pb::Source::Unspecified, "10.1.0.11"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (at.services.len(), at.frontends.len(), at.backends.len()),
        (2, 0, 2)
    );
    let vip = c
        .list(list("", pb::Source::Unspecified, "10.0.0.100"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (vip.services.len(), vip.frontends.len(), vip.backends.len()),
        (1, 1, 0)
    );
    rejected(
        &s,
        Code::InvalidArgument,
        &["address"],
        c.list(list("", pb::Source::Unspecified, "x")),
    )
    .await;
    rejected(
        &s,
        Code::InvalidArgument,
        &["source"],
        c.list(pb::ListRequest {
            source: 9,
            ..Default::default()
        }),
    )
    .await;

    // A stale expected revision changes nothing.
    rejected(
        &s,
        Code::FailedPrecondition,
        &["request: expected_revision: 1 is stale, the current revision is"],
        c.apply(pb::ApplyRequest {
            changes: vec![up(C::DeleteService("default/web".into()))],
            source: 0,
            expected_revision: 1,
        }),
    )
    .await;
    let r = c
        .apply(pb::ApplyRequest {
            changes: vec![up(C::DeleteService("default/web".into()))],
            source: 0,
            expected_revision: 2,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.revision, 3);
    rejected(
        &s,
        Code::NotFound,
        &["service \"default/web\": name: no such service"],
        c.get_service(pb::GetServiceRequest {
            name: "default/web".into(),
        }),
    )
    .await;
    rejected(
        &s,
        Code::InvalidArgument,
        &["name"],
        c.get_service(pb::GetServiceRequest { name: "web".into() }),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_name_object_and_field_and_change_nothing() {
    let s = Server::start();
    let mut c = client(&s).await;
    c.apply(apply_req(web_changes())).await.unwrap();
    assert_eq!(s.revision(), 1);

    // INVALID_ARGUMENT, from the conversion: position, object and field.
    let mut bad = web_changes();
    bad.push(up(C::UpsertFrontend(frontend(
        "default/web",
        "10.0.0.101",
        70_000,
    ))));
    rejected(
        &s,
        Code::InvalidArgument,
        &["changes[4]", "frontend", "port", "70000"],
        c.apply(apply_req(bad)),
    )
    .await;
    let mut bad = web_changes();
    bad[2] = up(C::UpsertBackend(pb::Backend {
        weight: Some(1 << 20),
        ..backend("default/web", "10.1.0.13", 8080)
    }));
    rejected(
        &s,
        Code::InvalidArgument,
        &["changes[2]", "backend", "weight"],
        c.apply(apply_req(bad)),
    )
    .await;
    rejected(
        &s,
        Code::InvalidArgument,
        &["changes[0]", "protocol"],
        c.apply(apply_req(vec![up(C::UpsertFrontend(pb::Frontend {
            protocol: 0,
            ..frontend("default/web", "10.0.0.101", 80)
        }))])),
    )
    .await;
    rejected(
        &s,
        Code::InvalidArgument,
        &["changes[0]", "mode"],
        c.apply(apply_req(vec![up(C::UpsertService(pb::Service {
            mode: 42,
            ..service("default/web")
        }))])),
    )
    .await;
    rejected(
        &s,
        Code::InvalidArgument,
        &["source"],
        c.apply(pb::ApplyRequest {
            source: 17,
            ..apply_req(web_changes())
        }),
    )
    .await;
    rejected(
        &s,
        Code::InvalidArgument,
        &["changes[0]", "change"],
        c.apply(apply_req(vec![pb::Change { change: None }])),
    )
    .await;

    // NOT_FOUND: a reference to a missing service.
    rejected(
        &s,
        Code::NotFound,
        &["default/missing"],
        c.apply(apply_req(vec![up(C::UpsertBackend(backend(
            "default/missing",
            "10.1.0.11",
            80,
        )))])),
    )
    .await;

    // ALREADY_EXISTS: a frontend that belongs to another service.
    rejected(
        &s,
        Code::AlreadyExists,
        &["10.0.0.100:80/tcp", "service"],
        c.apply(apply_req(vec![
            up(C::UpsertService(service("default/other"))),
            up(C::UpsertFrontend(frontend("default/other", "10.0.0.100", 80))),
        ])),
    )
    .await;

    // FAILED_PRECONDITION: resync over another source's object.
    rejected(
        &s,
        Code::FailedPrecondition,
        &["services[0] service \"default/web\": source: owned by api, not k8s"],
        c.resync(pb::ResyncRequest {
            source: pb::Source::K8s.into(),
            services: vec![service("default/web")],
            ..Default::default()
        }),
    )
    .await;

    // Resync conversion errors name the list and index.
    rejected(
        &s,
        Code::InvalidArgument,
        &["backends[0]", "address"],
        c.resync(pb::ResyncRequest {
            source: pb::Source::K8s.into(),
            services: vec![service("default/k")],
            backends: vec![backend("default/k", "10.1.0", 80)],
            ..Default::default()
        }),
    )
    .await;
    assert_eq!(s.revision(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_prunes_only_its_own_source() {
    let s = Server::start();
    let mut c = client(&s).await;
    c.apply(apply_req(web_changes())).await.unwrap();
    let k8s = |services: Vec<pb::Service>, frontends: Vec<pb::Frontend>, backends: Vec<pb::Backend>| {
        pb::ResyncRequest {
            source: pb::Source::K8s.into(),
            services,
            frontends,
            backends,
        }
    };
    let r = c
        .resync(k8s(
            vec![service("k8s/a"), service("k8s/b")],
            vec![frontend("k8s/a", "10.0.0.10", 80)],
            vec![
                backend("k8s/a", "10.1.0.21", 80),
                backend("k8s/b", "10.1.0.22", 80),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.revision, r.added, r.updated, r.removed), (2, 5, 0, 0));
    // b goes, a's backend changes weight, a new backend appears.
    let r = c
        .resync(k8s(
            vec![service("k8s/a")],
            vec![frontend("k8s/a", "10.0.0.10", 80)],
            vec![
                pb::Backend {
                    weight: Some(5),
                    ..backend("k8s/a", "10.1.0.21", 80)
                },
                backend("k8s/a", "10.1.0.23", 80),
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.revision, 3);
    assert_eq!((r.added, r.updated), (1, 1));
    assert!(r.removed >= 1, "{r:?}");
    let st = s.state();
    assert!(st.services.contains_key("default/web"), "api objects stay");
    assert_eq!(
        st.backends
            .values()
            .filter(|b| b.key.service == "default/web")
            .count(),
        2
    );
    assert!(!st.services.contains_key("k8s/b"));
    assert!(st.services.contains_key("k8s/a"));
    // An empty resync of k8s leaves the api objects alone.
    let r = c.resync(k8s(vec![], vec![], vec![])).await.unwrap().into_inner();
    assert_eq!(r.revision, 4);
    let st = s.state();
    assert_eq!(st.services.keys().collect::<Vec<_>>(), vec!["default/web"]);
    assert_eq!(st.frontends.len(), 1);
    assert_eq!(st.backends.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_backend_state_by_address_port_and_service() {
    let s = Server::start();
    let mut c = client(&s).await;
    let mut changes = web_changes();
    changes.push(up(C::UpsertService(service("default/api"))));
    changes.push(up(C::UpsertBackend(backend("default/api", "10.1.0.11", 9090))));
    c.apply(apply_req(changes)).await.unwrap();
    let drain = |address: &str, port: u32, service: &str| pb::SetBackendStateRequest {
        address: address.into(),
        port,
        service: service.into(),
        state: pb::BackendState::Terminating.into(),
    };
    let r = c
        .set_backend_state(drain("10.1.0.11", 0, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.revision, r.matched), (2, 2));
    let st = s.state();
    let terminating: Vec<String> = st
        .backends
        .values()
        .filter(|b| b.effective_state() == lb_control::model::BackendState::Terminating)
        .map(|b| b.key.to_string())
        .collect();
    assert_eq!(
        terminating,
        vec!["10.1.0.11:9090 of default/api", "10.1.0.11:8080 of default/web"]
    );
    let r = c
        .set_backend_state(pb::SetBackendStateRequest {
            state: pb::BackendState::Maintenance.into(),
            ..drain("10.1.0.12", 8080, "default/web")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.matched, 1);
    let g = c
        .get_service(pb::GetServiceRequest {
            name: "default/web".into(),
        })
        .await
        .unwrap()
        .into_inner();
    // `state` is the source's, `operator_state` what SetBackendState set.
    let states: Vec<(i32, i32)> = g.backends.iter().map(|b| (b.state, b.operator_state)).collect();
    let active = i32::from(pb::BackendState::Active);
    assert_eq!(
        states,
        vec![
            (active, i32::from(pb::BackendState::Terminating)),
            (active, i32::from(pb::BackendState::Maintenance))
        ]
    );
    rejected(
        &s,
        Code::NotFound,
        &["10.1.0.99"],
        c.set_backend_state(drain("10.1.0.99", 0, "")),
    )
    .await;
    rejected(
        &s,
        Code::InvalidArgument,
        &["port"],
        c.set_backend_state(drain("10.1.0.11", 65_536, "")),
    )
    .await;
    rejected(
        &s,
        Code::InvalidArgument,
        &["address"],
        c.set_backend_state(drain("", 0, "")),
    )
    .await;
    rejected(
        &s,
        Code::InvalidArgument,
        &["service"],
        c.set_backend_state(drain("10.1.0.11", 0, "api")),
    )
    .await;
    rejected(
        &s,
        Code::InvalidArgument,
        &["state"],
        c.set_backend_state(pb::SetBackendStateRequest {
            state: 9,
            ..drain("10.1.0.11", 0, "")
        }),
    )
    .await;
    // Without a state: refused, not taken as active.
    rejected(
        &s,
        Code::InvalidArgument,
        &["request: state: must be set"],
        c.set_backend_state(pb::SetBackendStateRequest {
            state: pb::BackendState::Unspecified.into(),
            ..drain("10.1.0.11", 0, "")
        }),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_receives_every_commit() {
    let s = Server::start();
    let mut c = client(&s).await;
    let mut events = c.watch(pb::WatchRequest {}).await.unwrap().into_inner();
    c.apply(apply_req(web_changes())).await.unwrap();
    c.apply(apply_req(vec![up(C::DeleteBackend(pb::BackendKey {
        service: "default/web".into(),
        address: "10.1.0.12".into(),
        port: 8080,
    }))]))
    .await
    .unwrap();
    c.set_backend_state(pb::SetBackendStateRequest {
        address: "10.1.0.11".into(),
        state: pb::BackendState::Terminating.into(),
        ..Default::default()
    })
    .await
    .unwrap();

    let e1 = events.next().await.unwrap().unwrap();
    assert_eq!(e1.revision, 1);
    assert_eq!(e1.source, i32::from(pb::Source::Api));
    assert_eq!(e1.changes.len(), 4);
    assert!(matches!(&e1.changes[0].change, Some(C::UpsertService(s)) if s.name == "default/web"));
    let e2 = events.next().await.unwrap().unwrap();
    assert_eq!(e2.revision, 2);
    assert!(
        matches!(&e2.changes[..], [pb::Change { change: Some(C::DeleteBackend(k)) }] if k.address == "10.1.0.12")
    );
    let e3 = events.next().await.unwrap().unwrap();
    assert_eq!(e3.revision, 3);
    assert!(matches!(
        &e3.changes[..],
        [pb::Change { change: Some(C::UpsertBackend(b)) }]
            if b.operator_state == i32::from(pb::BackendState::Terminating)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_info() {
    let s = Server::start();
    let mut c = client(&s).await;
    c.apply(apply_req(web_changes())).await.unwrap();
    let st = c.get_stats(pb::GetStatsRequest {}).await.unwrap().into_inner();
    assert_eq!(st.revision, 1);
    assert!(st.workers.is_empty(), "no workers registered");
    assert_eq!(st.frontends.len(), 1);
    assert_eq!(st.frontends[0].service, "default/web");
    assert_eq!(st.frontends[0].stats.unwrap_or_default().packets, 0);
    assert_eq!(st.backends.len(), 2);

    let i = c.get_info(pb::GetInfoRequest {}).await.unwrap().into_inner();
    assert_eq!(i.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(i.instance_id, s.instance_id);
    assert!(!i.instance_id.is_empty());
    assert_eq!((i.revision, i.published_revision), (1, 1));
    assert_eq!(i.workers, 2);
    assert_eq!(i.ports.len(), 2);
    assert_eq!(i.ports[1].mac, "02:00:00:00:00:02");
    assert_eq!(i.ports[0].driver, "net_null");
    assert_eq!((i.ports[0].vlan, i.ports[1].vlan), (0, 20));
    assert_eq!((i.ports[0].mtu, i.ports[1].mtu), (1500, 9000));
    assert_eq!(
        (i.ports[0].addresses.as_slice(), i.ports[1].addresses.as_slice()),
        (&["10.0.0.1/24".to_string()][..], &["10.1.0.1/24".to_string()][..])
    );
    assert_eq!(i.snat_addresses, ["10.1.0.100"]);
    assert!(i.ports[0].link_up);
    assert_eq!(
        i.ports
            .iter()
            .map(|p| (p.rx_ipv4_checksum_offload, p.tx_ipv4_checksum_offload))
            .collect::<Vec<_>>(),
        [(false, false), (true, false)]
    );
    assert!(st.ports.iter().all(|p| p.rx_packets == 0));
    assert_eq!(st.control, Some(pb::ControlStats::default()));

    // What lbd records every second shows in the next answers.
    s.ports[0].set_link(false, 0);
    s.ports[1].set_counters(lb_control::grpc::PortCounters {
        rx_packets: 10,
        imissed: 3,
        ..Default::default()
    });
    let i = c.get_info(pb::GetInfoRequest {}).await.unwrap().into_inner();
    assert_eq!((i.ports[0].link_up, i.ports[0].speed_mbps), (false, 0));
    let st = c.get_stats(pb::GetStatsRequest {}).await.unwrap().into_inner();
    assert_eq!(st.ports.len(), 2);
    assert_eq!(
        (
            st.ports[1].id,
            st.ports[1].name.as_str(),
            st.ports[1].rx_packets,
            st.ports[1].imissed
        ),
        (1, "net_null1", 10, 3)
    );
    // So do the control thread's counters, as soon as they change.
    s.control.arp_requests.store(4, Ordering::Relaxed);
    s.control.neighbor_drops.store(7, Ordering::Relaxed);
    s.control.neighbor_entries.store(2, Ordering::Relaxed);
    let st = c.get_stats(pb::GetStatsRequest {}).await.unwrap().into_inner();
    assert_eq!(
        st.control,
        Some(pb::ControlStats {
            arp_requests: 4,
            neighbor_drops: 7,
            neighbor_entries: 2,
            ..Default::default()
        })
    );
    // The affinity table's occupancy: pins live by the pipeline's clock.
    assert_eq!((st.affinity_live_pins, st.affinity_table_size), (0, 1024));
    let (k1, k2) = (
        s.affinity.key(1, "10.0.0.1".parse().unwrap()),
        s.affinity.key(1, "10.0.0.2".parse().unwrap()),
    );
    s.affinity.pin(k1, 1, 10, 0);
    s.affinity.pin(k2, 1, 20, 0);
    // Counted once a second of the pipeline's clock.
    let st = c.get_stats(pb::GetStatsRequest {}).await.unwrap().into_inner();
    assert_eq!(st.affinity_live_pins, 0, "second 0 was counted already");
    s.clock_ms.store(1_000, Ordering::Relaxed);
    let st = c.get_stats(pb::GetStatsRequest {}).await.unwrap().into_inner();
    assert_eq!(st.affinity_live_pins, 2);
    s.clock_ms.store(15_000, Ordering::Relaxed);
    let st = c.get_stats(pb::GetStatsRequest {}).await.unwrap().into_inner();
    assert_eq!(st.affinity_live_pins, 1, "the first expired at second 10");
    // Another start has another instance id.
    let other = Server::start();
    assert_ne!(other.instance_id, s.instance_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let s = Server::start();
    let ch = channel(&s).await;
    let mut h = HealthClient::new(ch.clone());
    for service in ["", "lb.v1.LoadBalancer"] {
        let r = h
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, i32::from(ServingStatus::Serving), "{service:?}");
    }

    let mut r = ServerReflectionClient::new(ch);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut resp = r
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let msg = resp.next().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = msg.message_response else {
        panic!("{msg:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"lb.v1.LoadBalancer".to_string()), "{names:?}");
    assert!(names.contains(&"grpc.health.v1.Health".to_string()), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_persists_and_shutdown_ends_watches_and_removes_the_socket() {
    let mut s = Server::start();
    let mut c = client(&s).await;
    let mut events = c.watch(pb::WatchRequest {}).await.unwrap().into_inner();
    c.apply(apply_req(web_changes())).await.unwrap();
    assert_eq!(events.next().await.unwrap().unwrap().revision, 1);
    let before = s.state();

    // The open Watch stream does not hold the shutdown up.
    s.stop().unwrap();
    assert!(!s.socket.exists(), "socket removed on shutdown");
    let end = events.next().await;
    assert!(
        matches!(&end, None | Some(Err(_))),
        "watch stream ends at shutdown: {end:?}"
    );

    use lb_control::plane::ControlPlane;
    // The stopped server's plane still holds the state file: a second lbd
    // on it is refused.
    let e = ControlPlane::open(common::node(), Some(&s.state_file)).unwrap_err();
    assert!(e.to_string().contains("in use by another lbd"), "{e}");
    // lbd exits: its plane goes, and with it the lock.
    let memory_only = ControlPlane::open(common::node(), None).unwrap();
    let old = std::mem::replace(
        &mut s.plane,
        std::sync::Arc::new(std::sync::Mutex::new(memory_only)),
    );
    assert_eq!(
        std::sync::Arc::strong_count(&old),
        1,
        "the stopped server let go of the plane"
    );
    drop(old);
    let reopened = ControlPlane::open(common::node(), Some(&s.state_file)).unwrap();
    assert_eq!(reopened.revision(), 1);
    assert_eq!(reopened.state(), &before);
}

/// A request over the service codec's bounds (`lb_proto::bounded`) is
/// refused from its wire bytes, before it is decoded: the message says
/// "more than", which only that check says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_the_codec_bounds_are_refused_before_decoding() {
    let s = Server::start();
    let mut c = client(&s).await;
    let n = lb_proto::bounded::MAX_CHANGES;
    rejected(
        &s,
        Code::InvalidArgument,
        &["request: changes: more than 1000000 changes, at most 1000000 in one Apply"],
        c.apply(apply_req(vec![pb::Change::default(); n + 1])),
    )
    .await;
    // One service with more ranges than a request takes in all (and more
    // than the 256 a service takes, which only decoding would tell).
    let mut ranges = service("default/wide");
    ranges.source_ranges = vec!["1/8".into(); lb_proto::bounded::MAX_REQUEST_SOURCE_RANGES + 1];
    rejected(
        &s,
        Code::InvalidArgument,
        &["request: source_ranges: more than 4194304 source ranges"],
        c.apply(apply_req(vec![up(C::UpsertService(ranges))])),
    )
    .await;
    // At the bound the request decodes, and the control plane names what
    // is wrong with it (here: empty changes).
    rejected(
        &s,
        Code::InvalidArgument,
        &["changes[0]"],
        c.apply(apply_req(vec![pb::Change::default(); n])),
    )
    .await;
}

/// Methods other than Apply and Resync read at most 64 KiB of request:
/// a GetService or SetBackendState past that is refused with
/// RESOURCE_EXHAUSTED naming the method, one under it is decoded (the
/// plane answers it), and an Apply of more than that is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_methods_take_small_requests_only() {
    let s = Server::start();
    let mut c = client(&s).await;
    c.apply(apply_req(web_changes())).await.unwrap();
    let long = format!(
        "default/{}",
        "a".repeat(lb_control::grpc::MAX_SMALL_REQUEST_BYTES)
    );
    let words = [
        "request larger than 65536 bytes",
        "only Apply and Resync take big requests",
    ];
    let get = pb::GetServiceRequest { name: long.clone() };
    rejected(
        &s,
        Code::ResourceExhausted,
        &[&["GetService"], &words[..]].concat(),
        c.get_service(get),
    )
    .await;
    let set = pb::SetBackendStateRequest {
        address: "10.1.0.11".into(),
        port: 8080,
        service: long,
        state: pb::BackendState::Maintenance.into(),
    };
    rejected(
        &s,
        Code::ResourceExhausted,
        &[&["SetBackendState"], &words[..]].concat(),
        c.set_backend_state(set),
    )
    .await;
    // Under the bound: decoded, and the plane names what is wrong.
    let get = pb::GetServiceRequest {
        name: format!("default/{}", "a".repeat(1000)),
    };
    rejected(&s, Code::InvalidArgument, &["1-63 lowercase"], c.get_service(get)).await;
    // An error quotes the start of a long name and its length (quoted
    // whole, it made a header the client refused: an h2 protocol error),
    // so the object and field stay in the message.
    let long = format!("default/{}", "a".repeat(60_000));
    let get = pb::GetServiceRequest { name: long.clone() };
    rejected(
        &s,
        Code::InvalidArgument,
        &[
            "name \"aaa",
            "\"... (60000 bytes) in \"default/aaa",
            "(60008 bytes) must be 1-63 lowercase",
        ],
        c.get_service(get),
    )
    .await;
    let status = c
        .apply(apply_req(vec![up(C::UpsertService(service(&long)))]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let m = status.message();
    assert!(m.starts_with("changes[0] service \"default/aaa"), "{m}");
    assert!(m.contains("\"... (60008 bytes): name: name \"aaa"), "{m}");
    assert!(m.len() < 1024, "{m}");
    // An Apply past the bound (3,000 backends, ~100 KB) is taken.
    let mut changes = vec![up(C::UpsertService(service("default/big")))];
    for i in 0..3000u32 {
        let addr = format!("10.2.{}.{}", i / 250, i % 250 + 1);
        changes.push(up(C::UpsertBackend(backend("default/big", &addr, 8080))));
    }
    let req = apply_req(changes);
    assert!(prost::Message::encoded_len(&req) > lb_control::grpc::MAX_SMALL_REQUEST_BYTES);
    c.apply(req).await.expect("Apply takes big requests");
    assert_eq!(s.state().backends.len(), 3002);
}

/// At most two Apply/Resync calls at once, through a real server: while
/// a long commit holds the plane's lock, of three writes sent together on
/// one channel exactly one is refused at once with UNAVAILABLE (retry),
/// and the two others commit once the lock is free; the next write is
/// taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_concurrent_write_is_refused_at_once() {
    let s = Server::start();
    let c = client(&s).await;
    let plane = std::sync::Arc::clone(&s.plane);
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let _commit = plane.lock().unwrap();
        locked_tx.send(()).unwrap();
        // Bounded, should the test fail before it lets go.
        let _ = go_rx.recv_timeout(std::time::Duration::from_secs(20));
    });
    locked_rx.recv().unwrap();
    let writes: Vec<_> = (0..3)
        .map(|i| {
            let mut c = c.clone();
            tokio::spawn(async move {
                c.apply(apply_req(vec![up(C::UpsertService(service(&format!(
                    "default/w{i}"
                ))))]))
                .await
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !writes.iter().any(|w| w.is_finished()) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The two others wait on the lock.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (done, waiting): (Vec<_>, Vec<_>) = writes.into_iter().partition(|w| w.is_finished());
    assert_eq!((done.len(), waiting.len()), (1, 2));
    let refused = done
        .into_iter()
        .next()
        .unwrap()
        .await
        .unwrap()
        .expect_err("refused");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("retry"), "{refused:?}");
    go_tx.send(()).unwrap();
    holder.join().unwrap();
    for w in waiting {
        w.await.unwrap().expect("committed once the lock was free");
    }
    let mut c = c.clone();
    c.apply(apply_req(vec![up(C::UpsertService(service("default/after")))]))
        .await
        .expect("the shares came back");
    assert_eq!(s.state().services.len(), 3);
}
