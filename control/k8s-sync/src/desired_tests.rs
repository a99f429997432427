use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use lb_proto::v1 as pb;
use serde_json::json;

use super::*;

fn svc(v: serde_json::Value) -> Service {
    serde_json::from_value(v).unwrap()
}

fn slice(v: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(v).unwrap()
}

/// A LoadBalancer Service `default/web` on 192.0.2.10:80 → 8080.
fn web() -> serde_json::Value {
    json!({
        "metadata": {"namespace": "default", "name": "web"},
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}
    })
}

fn web_slice(endpoints: serde_json::Value) -> EndpointSlice {
    slice(json!({
        "metadata": {"namespace": "default", "name": "web-abcde",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints
    }))
}

fn ready(addr: &str, node: &str) -> serde_json::Value {
    json!({"addresses": [addr], "conditions": {"ready": true}, "nodeName": node, "zone": "z1"})
}

fn map(services: &[Service], slices: &[EndpointSlice]) -> Desired {
    desired(services, slices, &Options::default(), None)
}

fn endpoints(d: &Desired) -> Vec<(String, String, u32, i32)> {
    d.backends
        .iter()
        .map(|b| (b.service.clone(), b.address.clone(), b.port, b.state))
        .collect()
}

#[test]
fn a_load_balancer_service_and_its_ready_endpoints() {
    let d = map(
        &[svc(web())],
        &[web_slice(json!([
            ready("10.244.1.5", "n1"),
            ready("10.244.2.7", "n2")
        ]))],
    );
    assert_eq!(
        d.services,
        vec![pb::Service {
            name: "default/web".into(),
            mode: pb::ForwardingMode::Fullnat as i32,
            traffic_policy: pb::TrafficPolicy::Cluster as i32,
            session_affinity_timeout_seconds: 0,
            source_ranges: vec![],
            source: pb::Source::K8s as i32,
        }]
    );
    // The cluster IP is not a frontend by default.
    assert_eq!(d.frontends.len(), 1, "{:?}", d.frontends);
    let f = &d.frontends[0];
    assert_eq!(
        (f.address.as_str(), f.port, f.protocol),
        ("192.0.2.10", 80, pb::Protocol::Tcp as i32)
    );
    assert_eq!(f.r#type, pb::FrontendType::LoadBalancer as i32);
    let active = pb::BackendState::Active as i32;
    assert_eq!(
        endpoints(&d),
        vec![
            ("default/web".into(), "10.244.1.5".into(), 8080, active),
            ("default/web".into(), "10.244.2.7".into(), 8080, active),
        ]
    );
    assert_eq!(
        (d.backends[0].node.as_str(), d.backends[0].zone.as_str()),
        ("n1", "z1")
    );
    assert!(d.skipped.is_empty(), "{:?}", d.skipped);
    // What is sent is the k8s source's.
    assert_eq!(d.request().source, pb::Source::K8s as i32);
}

#[test]
fn endpoint_conditions_become_states() {
    let d = map(
        &[svc(web())],
        &[web_slice(json!([
            {"addresses": ["10.0.1.1"]},
            {"addresses": ["10.0.1.2"], "conditions": {"ready": false}},
            {"addresses": ["10.0.1.3"], "conditions": {"ready": false, "serving": true, "terminating": true}},
            {"addresses": ["10.0.1.4"], "conditions": {"ready": false, "serving": false, "terminating": true}},
        ]))],
    );
    let states: Vec<i32> = d.backends.iter().map(|b| b.state).collect();
    assert_eq!(
        states,
        vec![
            pb::BackendState::Active as i32,
            pb::BackendState::Quarantined as i32,
            pb::BackendState::Terminating as i32,
            pb::BackendState::Terminating as i32,
        ]
    );
}

#[test]
fn with_no_ready_endpoint_those_terminating_that_serve_take_new_connections() {
    let serving = json!({"addresses": ["10.0.1.1"], "conditions": {"ready": false, "serving": true, "terminating": true}});
    let stopped = json!({"addresses": ["10.0.1.2"], "conditions": {"ready": false, "serving": false, "terminating": true}});
    let d = map(
        &[svc(web())],
        &[web_slice(json!([serving.clone(), stopped.clone()]))],
    );
    let states: Vec<i32> = d.backends.iter().map(|b| b.state).collect();
    assert_eq!(
        states,
        vec![
            pb::BackendState::Active as i32,
            pb::BackendState::Terminating as i32
        ]
    );
    // With a ready one, they drain.
    let d = map(
        &[svc(web())],
        &[web_slice(json!([serving, stopped, ready("10.0.1.3", "n1")]))],
    );
    let states: Vec<i32> = d.backends.iter().map(|b| b.state).collect();
    assert_eq!(
        states,
        vec![
            pb::BackendState::Terminating as i32,
            pb::BackendState::Terminating as i32,
            pb::BackendState::Active as i32
        ]
    );
}

#[test]
fn an_endpoint_in_two_slices_keeps_its_best_state() {
    let mut other = web_slice(json!([{"addresses": ["10.0.1.1"], "conditions": {"ready": false}}]));
    other.metadata.name = Some("web-fghij".into());
    let d = map(
        &[svc(web())],
        &[other, web_slice(json!([ready("10.0.1.1", "n1")]))],
    );
    assert_eq!(
        endpoints(&d),
        vec![(
            "default/web".into(),
            "10.0.1.1".into(),
            8080,
            pb::BackendState::Active as i32
        )]
    );
}

#[test]
fn several_ports_are_several_lbd_services_with_their_target_ports() {
    let mut v = web();
    v["spec"]["ports"] = json!([
        {"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"},
        {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}
    ]);
    let s = slice(json!({
        "metadata": {"namespace": "default", "name": "web-x", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "dns", "port": 5353, "protocol": "UDP"}],
        "endpoints": [ready("10.0.1.1", "n1")]
    }));
    let d = map(&[svc(v)], &[s]);
    let names: Vec<&str> = d.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["default/web-dns", "default/web-http"]);
    let fes: Vec<(String, u32, i32)> = d
        .frontends
        .iter()
        .map(|f| (f.service.clone(), f.port, f.protocol))
        .collect();
    assert_eq!(
        fes,
        vec![
            ("default/web-dns".into(), 53, pb::Protocol::Udp as i32),
            ("default/web-http".into(), 80, pb::Protocol::Tcp as i32),
        ]
    );
    let active = pb::BackendState::Active as i32;
    assert_eq!(
        endpoints(&d),
        vec![
            ("default/web-dns".into(), "10.0.1.1".into(), 5353, active),
            ("default/web-http".into(), "10.0.1.1".into(), 8080, active),
        ]
    );
}

#[test]
fn annotations_and_spec_fields_map_to_the_service() {
    let mut v = web();
    v["metadata"]["annotations"] = json!({"lbd.io/forwarding-mode": "DNAT"});
    v["spec"]["externalTrafficPolicy"] = json!("Local");
    v["spec"]["sessionAffinity"] = json!("ClientIP");
    v["spec"]["loadBalancerSourceRanges"] = json!(["198.51.100.0/24"]);
    let d = map(&[svc(v.clone())], &[]);
    let s = &d.services[0];
    assert_eq!(s.mode, pb::ForwardingMode::Dnat as i32);
    // A gateway that runs no pods would have no local backend.
    assert_eq!(s.traffic_policy, pb::TrafficPolicy::Cluster as i32);
    let node_local = Options {
        node_local: true,
        ..Options::default()
    };
    let d = desired(&[svc(v.clone())], &[], &node_local, None);
    assert_eq!(d.services[0].traffic_policy, pb::TrafficPolicy::Local as i32);
    assert_eq!(s.session_affinity_timeout_seconds, DEFAULT_AFFINITY_SECONDS);
    assert_eq!(s.source_ranges, vec!["198.51.100.0/24".to_string()]);
    v["spec"]["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 60}});
    assert_eq!(
        map(&[svc(v.clone())], &[]).services[0].session_affinity_timeout_seconds,
        60
    );
    // The default mode is the options'.
    v["metadata"]["annotations"] = json!({});
    let dnat = Options {
        mode: pb::ForwardingMode::Dnat,
        ..Options::default()
    };
    assert_eq!(
        desired(&[svc(v)], &[], &dnat, None).services[0].mode,
        pb::ForwardingMode::Dnat as i32
    );
}

#[test]
fn what_cannot_be_mapped_is_skipped_and_said() {
    let mut bad_mode = web();
    bad_mode["metadata"]["name"] = json!("bad-mode");
    bad_mode["metadata"]["annotations"] = json!({"lbd.io/forwarding-mode": "tunnel"});
    let mut sctp = web();
    sctp["metadata"]["name"] = json!("sctp");
    sctp["status"]["loadBalancer"]["ingress"] = json!([{"ip": "192.0.2.11"}]);
    sctp["spec"]["ports"] = json!([{"port": 9, "protocol": "SCTP"}]);
    let mut ranges = web();
    ranges["metadata"]["name"] = json!("ranges");
    ranges["status"]["loadBalancer"]["ingress"] = json!([{"ip": "192.0.2.12"}, {"hostname": "lb.example"}]);
    ranges["spec"]["loadBalancerSourceRanges"] = json!(["not-a-cidr"]);
    let mut loopback = web();
    loopback["metadata"]["name"] = json!("loopback");
    loopback["status"]["loadBalancer"]["ingress"] = json!([{"ip": "127.0.0.1"}, {"ip": "192.0.2.13"}]);
    let d = map(&[svc(bad_mode), svc(sctp), svc(ranges), svc(loopback)], &[]);
    let names: Vec<&str> = d.services.iter().map(|s| s.name.as_str()).collect();
    // The loopback VIP is left out, the Service keeps its other one.
    assert_eq!(names, ["default/loopback"]);
    assert_eq!(d.frontends.len(), 1);
    assert_eq!(d.frontends[0].address, "192.0.2.13");
    let text: Vec<String> = d.skipped.iter().map(|s| s.to_string()).collect();
    let has = |what: &str, why: &str| {
        assert!(
            text.iter().any(|t| t.starts_with(what) && t.contains(why)),
            "no skip of {what:?} for {why:?} in {text:#?}"
        )
    };
    has("Service default/bad-mode", "\"tunnel\" is not dnat or fullnat");
    has("Service default/sctp port 9", "protocol SCTP");
    has("Service default/ranges port 80", "source_ranges[0]");
    has("Service default/loopback port 80 frontend 127.0.0.1", "127.0.0.1");
    assert_eq!(d.skipped.len(), 4, "{text:#?}");
}

#[test]
fn a_frontend_two_services_claim_goes_to_the_first_by_name() {
    let mut b = web();
    b["metadata"]["name"] = json!("b");
    let mut a = web();
    a["metadata"]["name"] = json!("a");
    // In any order of the watch's cache.
    for order in [[svc(b.clone()), svc(a.clone())], [svc(a.clone()), svc(b.clone())]] {
        let d = map(&order, &[]);
        let names: Vec<&str> = d.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["default/a"]);
        assert_eq!(d.frontends[0].service, "default/a");
        assert_eq!(d.skipped.len(), 1);
        assert!(
            d.skipped[0]
                .to_string()
                .contains("lbd service \"default/a\" has it already"),
            "{:?}",
            d.skipped
        );
    }
}

#[test]
fn frontend_types_and_the_load_balancer_class_choose_the_addresses() {
    let mut v = web();
    v["spec"]["externalIPs"] = json!(["203.0.113.5"]);
    v["spec"]["clusterIPs"] = json!(["10.96.0.10", "fd00::10"]);
    let all = Options {
        types: [
            FrontendKind::LoadBalancer,
            FrontendKind::ExternalIp,
            FrontendKind::ClusterIp,
        ]
        .into(),
        ..Options::default()
    };
    let addrs = |d: &Desired| -> Vec<(String, i32)> {
        d.frontends
            .iter()
            .map(|f| (f.address.clone(), f.r#type))
            .collect()
    };
    assert_eq!(
        addrs(&desired(&[svc(v.clone())], &[], &all, None)),
        vec![
            ("10.96.0.10".into(), pb::FrontendType::ClusterIp as i32),
            ("192.0.2.10".into(), pb::FrontendType::LoadBalancer as i32),
            ("203.0.113.5".into(), pb::FrontendType::ExternalIp as i32),
            ("fd00::10".into(), pb::FrontendType::ClusterIp as i32),
        ]
    );
    // Another class's LoadBalancer Service: only its external IP.
    v["spec"]["loadBalancerClass"] = json!("example.com/other");
    assert_eq!(
        addrs(&map(&[svc(v.clone())], &[])),
        vec![("203.0.113.5".into(), pb::FrontendType::ExternalIp as i32)]
    );
    let ours = Options {
        load_balancer_class: Some("example.com/other".into()),
        ..Options::default()
    };
    assert_eq!(desired(&[svc(v.clone())], &[], &ours, None).frontends.len(), 2);
    // A Service with no address of an enabled type is not in lbd at all.
    let only_cluster = Options {
        types: BTreeSet::from([FrontendKind::ExternalIp]),
        ..Options::default()
    };
    let mut plain = web();
    plain["spec"]["type"] = json!("ClusterIP");
    let d = desired(&[svc(plain)], &[], &only_cluster, None);
    assert!(d.services.is_empty() && d.skipped.is_empty(), "{d:?}");
    // ExternalName Services have no endpoints to balance.
    let mut ext = web();
    ext["spec"]["type"] = json!("ExternalName");
    ext["spec"]["externalIPs"] = json!(["203.0.113.5"]);
    assert!(map(&[svc(ext)], &[]).services.is_empty());
}

#[test]
fn slices_of_other_services_and_ports_are_not_mixed_in() {
    let other_svc = slice(json!({
        "metadata": {"namespace": "default", "name": "api-1", "labels": {"kubernetes.io/service-name": "api"}},
        "addressType": "IPv4", "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": [ready("10.0.9.9", "n1")]
    }));
    let other_ns = slice(json!({
        "metadata": {"namespace": "prod", "name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": [ready("10.0.9.8", "n1")]
    }));
    let udp_port = slice(json!({
        "metadata": {"namespace": "default", "name": "web-2", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"port": 8080, "protocol": "UDP"}],
        "endpoints": [ready("10.0.9.7", "n1")]
    }));
    let fqdn = slice(json!({
        "metadata": {"namespace": "default", "name": "web-3", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "FQDN", "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["pod.example"]}]
    }));
    let v6 = slice(json!({
        "metadata": {"namespace": "default", "name": "web-4", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv6", "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["fd00::7", "fd00::8"]}]
    }));
    let d = map(&[svc(web())], &[other_svc, other_ns, udp_port, fqdn, v6]);
    let addrs: Vec<&str> = d.backends.iter().map(|b| b.address.as_str()).collect();
    // One address an endpoint: the first. (An IPv6 slice of an IPv4
    // Service is taken: lbd keeps a ring a family.)
    assert_eq!(addrs, ["fd00::7"]);
    assert!(d.skipped.is_empty(), "{:?}", d.skipped);
}

#[test]
fn the_mapping_is_deterministic() {
    let mut a = web();
    a["metadata"]["name"] = json!("a");
    a["status"]["loadBalancer"]["ingress"] = json!([{"ip": "192.0.2.20"}]);
    let s = web_slice(json!([ready("10.0.1.1", "n1"), ready("10.0.1.2", "n1")]));
    let one = map(&[svc(web()), svc(a.clone())], std::slice::from_ref(&s));
    let two = map(&[svc(a), svc(web())], &[s]);
    assert_eq!(one, two);
    assert_eq!(one.services.len(), 2);
}

#[test]
fn names_too_long_for_lbd_are_skipped() {
    let mut v = web();
    let long = "a".repeat(60);
    v["metadata"]["name"] = json!(long);
    v["spec"]["ports"] = json!([
        {"name": "http", "port": 80, "protocol": "TCP"},
        {"name": "https", "port": 443, "protocol": "TCP"}
    ]);
    let d = map(&[svc(v)], &[]);
    assert!(d.services.is_empty());
    assert_eq!(d.skipped.len(), 2, "{:?}", d.skipped);
    assert!(
        d.skipped[0].reason.starts_with("lbd service name: "),
        "{:?}",
        d.skipped
    );
}

#[test]
fn a_service_created_later_does_not_take_a_vip_or_a_name_over() {
    let mut b = web();
    b["metadata"]["name"] = json!("b");
    let before = map(&[svc(b.clone())], &[]);
    assert_eq!(before.frontends[0].service, "default/b");
    // "a" sorts first and claims b's VIP: b keeps it, a is said skipped.
    let mut a = web();
    a["metadata"]["name"] = json!("a");
    let both = [svc(a.clone()), svc(b.clone())];
    let after = desired(&both, &[], &Options::default(), Some(&before));
    let owners: Vec<&str> = after.frontends.iter().map(|f| f.service.as_str()).collect();
    assert_eq!(owners, ["default/b"]);
    assert_eq!(after.skipped.len(), 1, "{:?}", after.skipped);
    assert!(after.skipped[0]
        .object
        .starts_with("Service default/a port 80 frontend 192.0.2.10"));
    // Without a previous state (a restart), the first by name.
    assert_eq!(map(&both, &[]).frontends[0].service, "default/a");
    // Once b lets it go, a has it.
    let later = desired(&[svc(a)], &[], &Options::default(), Some(&after));
    assert_eq!(later.frontends[0].service, "default/a");

    // A single-port Service web-http, then web with ports http and https,
    // whose port http maps to the same lbd name.
    let mut web_http = web();
    web_http["metadata"]["name"] = json!("web-http");
    web_http["status"]["loadBalancer"]["ingress"] = json!([{"ip": "192.0.2.30"}]);
    let before = map(&[svc(web_http.clone())], &[]);
    assert_eq!(before.origins["default/web-http"], "default/web-http");
    let mut multi = web();
    multi["spec"]["ports"] = json!([
        {"name": "http", "port": 80, "protocol": "TCP"},
        {"name": "https", "port": 443, "protocol": "TCP"}
    ]);
    let both = [svc(multi), svc(web_http)];
    let after = desired(&both, &[], &Options::default(), Some(&before));
    let fe: Vec<(&str, &str)> = after
        .frontends
        .iter()
        .map(|f| (f.service.as_str(), f.address.as_str()))
        .collect();
    assert_eq!(
        fe,
        [
            ("default/web-https", "192.0.2.10"),
            ("default/web-http", "192.0.2.30")
        ]
    );
    assert_eq!(after.origins["default/web-http"], "default/web-http");
    assert!(
        after
            .skipped
            .iter()
            .any(|s| s.object == "Service default/web port \"http\""
                && s.reason.contains("is another Service port's")),
        "{:?}",
        after.skipped
    );
    // Without the previous state, web (first by name) has the name.
    assert_eq!(
        map(&both, &[]).origins["default/web-http"],
        "default/web port http"
    );
}

#[test]
fn a_name_holder_left_without_a_frontend_lets_the_name_go() {
    // web (ports http, https) sorts first and claims the name
    // default/web-http; but its VIP is a's (held before), so it keeps no
    // frontend: web-http, whose own VIP is free, has the name.
    let mut a = web();
    a["metadata"]["name"] = json!("a");
    let before = map(&[svc(a.clone())], &[]);
    let mut multi = web();
    multi["spec"]["ports"] = json!([
        {"name": "http", "port": 80, "protocol": "TCP"},
        {"name": "https", "port": 443, "protocol": "TCP"}
    ]);
    let mut web_http = web();
    web_http["metadata"]["name"] = json!("web-http");
    web_http["status"]["loadBalancer"]["ingress"] = json!([{"ip": "192.0.2.30"}]);
    let now = [svc(a), svc(multi), svc(web_http)];
    let d = desired(&now, &[], &Options::default(), Some(&before));
    let fe: Vec<(&str, &str, u32)> = d
        .frontends
        .iter()
        .map(|f| (f.service.as_str(), f.address.as_str(), f.port))
        .collect();
    assert_eq!(
        fe,
        [
            ("default/a", "192.0.2.10", 80),
            ("default/web-https", "192.0.2.10", 443),
            ("default/web-http", "192.0.2.30", 80)
        ]
    );
    assert_eq!(d.origins["default/web-http"], "default/web-http");
    let text: Vec<String> = d.skipped.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        text,
        ["Service default/web port \"http\" frontend 192.0.2.10:80: lbd service \"default/a\" has it already"]
    );
}

fn all_types() -> Options {
    Options {
        types: [
            FrontendKind::LoadBalancer,
            FrontendKind::ExternalIp,
            FrontendKind::ClusterIp,
            FrontendKind::NodePort,
        ]
        .into(),
        node_addresses: vec!["10.0.0.1".parse().unwrap(), "2001:db8::1".parse().unwrap()],
        ..Options::default()
    }
}

/// (lbd service, address, port, type) of each frontend.
fn frontends(d: &Desired) -> Vec<(String, String, u32, i32)> {
    let mut v: Vec<_> = d
        .frontends
        .iter()
        .map(|f| (f.service.clone(), f.address.clone(), f.port, f.r#type))
        .collect();
    v.sort();
    v
}

#[test]
fn node_ports_go_on_lbds_addresses() {
    let np = pb::FrontendType::NodePort as i32;
    let lb = pb::FrontendType::LoadBalancer as i32;
    let mut v = web();
    v["spec"]["ports"][0]["nodePort"] = json!(30080);
    let only_np = Options {
        types: [FrontendKind::NodePort].into(),
        ..all_types()
    };
    let slices = [web_slice(json!([ready("10.244.1.5", "n1")]))];
    // A LoadBalancer Service has node ports too: one lbd service, its
    // backends once; an IPv4 Service (its cluster IP says) on lbd's IPv4
    // address only.
    let d = desired(&[svc(v.clone())], &slices, &all_types(), None);
    let names: Vec<&str> = d.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["default/web"]);
    let ip = pb::FrontendType::ClusterIp as i32;
    let w = |a: &str, p: u32, t: i32| ("default/web".to_string(), a.to_string(), p, t);
    assert_eq!(
        frontends(&d),
        vec![
            w("10.0.0.1", 30080, np),
            w("10.96.0.10", 80, ip),
            w("192.0.2.10", 80, lb),
        ]
    );
    assert_eq!(d.backends.len(), 1);
    assert!(d.skipped.is_empty(), "{:?}", d.skipped);
    // A NodePort Service: only its node ports; dual-stack, on both
    // families' addresses; IPv6 only (`ipFamilies`), on the IPv6 one.
    v["spec"]["type"] = json!("NodePort");
    v["status"] = json!({});
    v["spec"]["ipFamilies"] = json!(["IPv4", "IPv6"]);
    let d = desired(&[svc(v.clone())], &slices, &only_np, None);
    assert_eq!(
        frontends(&d),
        vec![w("10.0.0.1", 30080, np), w("2001:db8::1", 30080, np)]
    );
    let mut v6 = v.clone();
    v6["spec"]["ipFamilies"] = json!(["IPv6"]);
    assert_eq!(
        frontends(&desired(&[svc(v6.clone())], &slices, &only_np, None)),
        vec![w("2001:db8::1", 30080, np)]
    );
    // lbd without an address of its family: said, not silently left out.
    let v4_only = Options {
        node_addresses: vec!["10.0.0.1".parse().unwrap()],
        ..only_np.clone()
    };
    let none = desired(&[svc(v6)], &slices, &v4_only, None);
    assert!(none.services.is_empty());
    assert_eq!(
        none.skipped.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["Service default/web node ports: lbd has no address of the Service's family (IPv6)"]
    );
    assert_eq!(endpoints(&d).len(), 1);
    // Not without the type, nor without addresses of lbd's, nor for a
    // ClusterIP Service (no node port), nor for a port without one.
    assert!(map(&[svc(v.clone())], &slices).services.is_empty());
    let nowhere = Options {
        node_addresses: Vec::new(),
        ..only_np.clone()
    };
    let d = desired(&[svc(v.clone())], &slices, &nowhere, None);
    assert!(d.services.is_empty() && d.skipped.is_empty(), "{d:?}");
    let mut plain = v.clone();
    plain["spec"]["type"] = json!("ClusterIP");
    assert!(desired(&[svc(plain)], &slices, &only_np, None)
        .services
        .is_empty());
    v["spec"]["ports"] = json!([
        {"name": "http", "port": 80, "nodePort": 30080},
        {"name": "admin", "port": 81}
    ]);
    let d = desired(&[svc(v)], &[], &only_np, None);
    let names: Vec<&str> = d.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["default/web-http"]);
}

#[test]
fn source_ranges_stay_on_the_load_balancer_frontends() {
    let mut v = web();
    v["spec"]["externalIPs"] = json!(["203.0.113.5"]);
    v["spec"]["ports"][0]["nodePort"] = json!(30080);
    v["spec"]["loadBalancerSourceRanges"] = json!(["198.51.100.0/24"]);
    let slices = [web_slice(json!([
        ready("10.244.1.5", "n1"),
        ready("10.244.2.7", "n2")
    ]))];
    let d = desired(&[svc(v.clone())], &slices, &all_types(), None);
    let services: Vec<(&str, &[String])> = d
        .services
        .iter()
        .map(|s| (s.name.as_str(), s.source_ranges.as_slice()))
        .collect();
    let ranges = ["198.51.100.0/24".to_string()];
    assert_eq!(
        services,
        [
            ("default/web", &ranges[..]),
            ("default/web-external", &[][..]),
            ("default/web-internal", &[][..]),
        ]
    );
    let (lb, ext, np, ip) = (
        pb::FrontendType::LoadBalancer as i32,
        pb::FrontendType::ExternalIp as i32,
        pb::FrontendType::NodePort as i32,
        pb::FrontendType::ClusterIp as i32,
    );
    let f = |s: &str, a: &str, p: u32, t: i32| (s.to_string(), a.to_string(), p, t);
    assert_eq!(
        frontends(&d),
        vec![
            f("default/web", "192.0.2.10", 80, lb),
            f("default/web-external", "10.0.0.1", 30080, np),
            f("default/web-external", "203.0.113.5", 80, ext),
            f("default/web-internal", "10.96.0.10", 80, ip),
        ]
    );
    // Each has every backend.
    for s in ["default/web", "default/web-external", "default/web-internal"] {
        assert_eq!(d.backends.iter().filter(|b| b.service == s).count(), 2, "{s}");
    }
    assert!(d.skipped.is_empty(), "{:?}", d.skipped);
    // Which Service port and group each lbd service is.
    assert_eq!(
        d.origins.values().map(String::as_str).collect::<Vec<_>>(),
        ["default/web", "default/web (external)", "default/web (internal)"]
    );
    // No load-balancer IP yet: the others keep their names.
    let mut pending = v.clone();
    pending["status"] = json!({});
    let d = desired(&[svc(pending)], &slices, &all_types(), None);
    let names: Vec<&str> = d.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["default/web-external", "default/web-internal"]);
    // Without source ranges, one lbd service.
    v["spec"]["loadBalancerSourceRanges"] = json!([]);
    let d = desired(&[svc(v)], &slices, &all_types(), None);
    let names: Vec<&str> = d.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["default/web"]);
    assert_eq!(d.frontends.len(), 4);
}

#[test]
fn the_internal_traffic_policy_is_the_cluster_ips() {
    let mut v = web();
    v["spec"]["externalTrafficPolicy"] = json!("Local");
    let local = Options {
        node_local: true,
        ..all_types()
    };
    let policies = |d: &Desired| -> Vec<(String, i32, usize)> {
        d.services
            .iter()
            .map(|s| {
                let n = d.frontends.iter().filter(|f| f.service == s.name).count();
                (s.name.clone(), s.traffic_policy, n)
            })
            .collect()
    };
    let (l, c) = (pb::TrafficPolicy::Local as i32, pb::TrafficPolicy::Cluster as i32);
    // External local, internal cluster (its default): two lbd services.
    assert_eq!(
        policies(&desired(&[svc(v.clone())], &[], &local, None)),
        [
            ("default/web".to_string(), l, 1),
            ("default/web-internal".to_string(), c, 1)
        ]
    );
    // Both local: one.
    v["spec"]["internalTrafficPolicy"] = json!("Local");
    assert_eq!(
        policies(&desired(&[svc(v.clone())], &[], &local, None)),
        [("default/web".to_string(), l, 2)]
    );
    // Internal local only.
    v["spec"]["externalTrafficPolicy"] = json!("Cluster");
    assert_eq!(
        policies(&desired(&[svc(v.clone())], &[], &local, None)),
        [
            ("default/web".to_string(), c, 1),
            ("default/web-internal".to_string(), l, 1)
        ]
    );
    // Without --node-local every policy is cluster: one.
    assert_eq!(
        policies(&desired(&[svc(v)], &[], &all_types(), None)),
        [("default/web".to_string(), c, 2)]
    );
}

#[test]
fn a_name_too_long_for_a_group_skips_that_group_only() {
    let long = "w".repeat(60);
    let mut v = web();
    v["metadata"]["name"] = json!(long);
    v["spec"]["loadBalancerSourceRanges"] = json!(["198.51.100.0/24"]);
    v["spec"]["externalIPs"] = json!(["203.0.113.5"]);
    let d = desired(&[svc(v)], &[], &all_types(), None);
    let names: Vec<&str> = d.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, [format!("default/{long}")]);
    let text: Vec<String> = d.skipped.iter().map(|s| s.to_string()).collect();
    assert_eq!(text.len(), 2, "{text:#?}");
    assert!(
        text.iter()
            .any(|t| t.contains("(external IPs and node ports)") && t.contains("lbd service name")),
        "{text:#?}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("(cluster IPs)") && t.contains("lbd service name")),
        "{text:#?}"
    );
}

#[test]
fn a_service_named_like_a_group_does_not_take_its_name_over() {
    let mut v = web();
    v["spec"]["externalIPs"] = json!(["203.0.113.5"]);
    v["spec"]["loadBalancerSourceRanges"] = json!(["198.51.100.0/24"]);
    let before = desired(&[svc(v.clone())], &[], &all_types(), None);
    assert!(before.origins.contains_key("default/web-external"));
    // A Service named web-external comes, with a VIP of its own: the name
    // stays web's group's (the one named first by name would have it).
    let mut other = web();
    other["metadata"]["name"] = json!("web-external");
    other["status"]["loadBalancer"]["ingress"] = json!([{"ip": "192.0.2.99"}]);
    other["spec"]["clusterIPs"] = json!(["10.96.0.99"]);
    {
        let d = desired(
            &[svc(v.clone()), svc(other.clone())],
            &[],
            &all_types(),
            Some(&before),
        );
        assert_eq!(
            d.origins["default/web-external"], "default/web (external)",
            "{d:?}"
        );
        assert!(
            d.frontends
                .iter()
                .any(|f| f.service == "default/web-external" && f.address == "203.0.113.5"),
            "{:?}",
            d.frontends
        );
        assert!(
            d.skipped
                .iter()
                .any(|s| s.object.starts_with("Service default/web-external")
                    && s.reason.contains("another Service port's")),
            "{:?}",
            d.skipped
        );
    }
}

#[test]
fn a_frontend_keeps_its_hold_when_it_moves_to_another_group() {
    let mut web_v = web();
    web_v["spec"]["externalIPs"] = json!(["203.0.113.5"]);
    let before = desired(&[svc(web_v.clone())], &[], &all_types(), None);
    // A Service that sorts first claims the external IP, while web gains
    // source ranges (the IP moves to web-external): web keeps it.
    let mut a = web();
    a["metadata"]["name"] = json!("a");
    a["status"] = json!({});
    a["spec"]["clusterIPs"] = json!(["10.96.0.1"]);
    a["spec"]["externalIPs"] = json!(["203.0.113.5"]);
    web_v["spec"]["loadBalancerSourceRanges"] = json!(["198.51.100.0/24"]);
    let d = desired(&[svc(a), svc(web_v)], &[], &all_types(), Some(&before));
    let holder: Vec<&str> = d
        .frontends
        .iter()
        .filter(|f| f.address == "203.0.113.5")
        .map(|f| f.service.as_str())
        .collect();
    assert_eq!(holder, ["default/web-external"], "{:?}", d.skipped);
}
