use std::collections::{BTreeMap, HashSet};

use lb_dataplane::drop::DropReason;
use lb_proto::v1 as pb;

use super::render;

fn worker(id: u32, rx: u64, drops: &[(&str, u64)]) -> pb::WorkerStats {
    pb::WorkerStats {
        worker: id,
        rx_packets: rx,
        tx_packets: rx - 1,
        conntrack_entries: 40 + u64::from(id),
        affinity_pins: 3,
        resets_sent: 2 + u64::from(id),
        too_big_sent: 5,
        drops: drops.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        ..Default::default()
    }
}

fn stats() -> pb::GetStatsResponse {
    pb::GetStatsResponse {
        frontends: vec![pb::FrontendStats {
            frontend: Some(pb::FrontendKey {
                address: "fd00::100".into(),
                port: 53,
                protocol: pb::Protocol::Udp.into(),
            }),
            service: "kube-system/dns".into(),
            stats: Some(pb::FlowStats {
                packets: 11,
                bytes: 1100,
                connections: 4,
            }),
        }],
        backends: vec![pb::BackendStats {
            backend: Some(pb::BackendKey {
                service: "kube-system/dns".into(),
                address: "10.1.0.53".into(),
                port: 53,
            }),
            stats: Some(pb::FlowStats {
                packets: 9,
                bytes: 900,
                connections: 4,
            }),
        }],
        workers: vec![
            worker(0, 100, &[("no_frontend", 7)]),
            worker(1, 50, &[("ttl_exceeded", 2), ("no_frontend", 1)]),
        ],
        ports: vec![pb::PortStats {
            id: 0,
            name: "0000:03:00.0".into(),
            rx_packets: 150,
            imissed: 6,
            ..Default::default()
        }],
        control: Some(pb::ControlStats {
            arp_requests: 12,
            neighbors: 3,
            ..Default::default()
        }),
        affinity_live_pins: 5,
        affinity_table_size: 262_144,
        ..Default::default()
    }
}

fn info() -> pb::GetInfoResponse {
    pb::GetInfoResponse {
        version: "0.1.0".into(),
        instance_id: "8d0e".into(),
        revision: 7,
        published_revision: 6,
        last_publish_micros: 1_500,
        ports: vec![pb::PortInfo {
            id: 0,
            name: "0000:03:00.0".into(),
            link_up: true,
            ..Default::default()
        }],
        workers: 2,
        snat_addresses: vec!["10.1.0.100".into()],
    }
}

/// The samples as an independent parser reads them: name and sorted labels
/// to value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let mut out = BTreeMap::new();
    for s in scrape.samples {
        let mut labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.sort();
        let v = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            other => panic!("{} is {other:?}", s.metric),
        };
        let key = format!("{}{{{}}}", s.metric, labels.join(","));
        assert!(out.insert(key.clone(), v).is_none(), "{key} twice");
    }
    out
}

#[test]
fn an_independent_parser_reads_every_counter_back() {
    let text = render(&stats(), &info());
    let m = samples(&text);
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));
    assert_eq!(get("lbd_info{instance_id=8d0e,version=0.1.0}"), 1.0);
    assert_eq!(get("lbd_revision{}"), 7.0);
    assert_eq!(get("lbd_published_revision{}"), 6.0);
    assert_eq!(get("lbd_last_publish_seconds{}"), 0.0015);
    assert_eq!(get("lbd_workers{}"), 2.0);
    assert_eq!(get("lbd_worker_rx_packets_total{worker=0}"), 100.0);
    assert_eq!(get("lbd_worker_tx_packets_total{worker=1}"), 49.0);
    assert_eq!(get("lbd_conntrack_entries{worker=1}"), 41.0);
    assert_eq!(get("lbd_affinity_pins_total{worker=0}"), 3.0);
    assert_eq!(get("lbd_worker_resets_sent_total{worker=1}"), 3.0);
    assert_eq!(get("lbd_worker_too_big_sent_total{worker=0}"), 5.0);
    assert_eq!(get("lbd_worker_slot_overflow_total{worker=1}"), 0.0);
    assert_eq!(get("lbd_drops_total{reason=no_frontend,worker=0}"), 7.0);
    assert_eq!(get("lbd_drops_total{reason=no_frontend,worker=1}"), 1.0);
    assert_eq!(get("lbd_drops_total{reason=ttl_exceeded,worker=1}"), 2.0);
    // Every reason for every worker, the ones that never happened at 0.
    assert_eq!(get("lbd_drops_total{reason=ttl_exceeded,worker=0}"), 0.0);
    let drops = m.keys().filter(|k| k.starts_with("lbd_drops_total{")).count();
    assert_eq!(drops, 2 * DropReason::COUNT);
    assert_eq!(
        get("lbd_frontend_packets_total{address=fd00::100,port=53,protocol=udp,service=kube-system/dns}"),
        11.0
    );
    assert_eq!(
        get("lbd_frontend_connections_total{address=fd00::100,port=53,protocol=udp,service=kube-system/dns}"),
        4.0
    );
    assert_eq!(
        get("lbd_backend_bytes_total{address=10.1.0.53,port=53,service=kube-system/dns}"),
        900.0
    );
    assert_eq!(
        get("lbd_port_rx_packets_total{name=0000:03:00.0,port_id=0}"),
        150.0
    );
    assert_eq!(get("lbd_port_imissed_total{name=0000:03:00.0,port_id=0}"), 6.0);
    assert_eq!(get("lbd_port_oerrors_total{name=0000:03:00.0,port_id=0}"), 0.0);
    assert_eq!(get("lbd_port_link_up{name=0000:03:00.0,port_id=0}"), 1.0);
    assert_eq!(get("lbd_control_arp_requests_total{}"), 12.0);
    assert_eq!(get("lbd_neighbors{}"), 3.0);
    assert_eq!(get("lbd_affinity_live_pins{}"), 5.0);
    assert_eq!(get("lbd_affinity_table_size{}"), 262_144.0);
}

#[test]
fn families_are_declared_once_and_contiguous() {
    let text = render(&stats(), &info());
    let mut declared: Vec<(String, String)> = Vec::new();
    let mut seen = HashSet::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap().to_string();
            assert!(seen.insert(name.clone()), "{name} declared twice");
            current = Some(name);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert_eq!(Some(name), current.as_deref(), "TYPE without its HELP");
            assert!(kind == "counter" || kind == "gauge", "{line}");
            // Counters end in _total, gauges do not.
            assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
            declared.push((name.to_string(), kind.to_string()));
        } else {
            let name = line.split(['{', ' ']).next().unwrap();
            assert_eq!(
                Some(name),
                current.as_deref(),
                "a sample outside its family: {line}"
            );
            assert!(name.starts_with("lbd_"), "{line}");
        }
    }
    assert!(text.ends_with('\n'));
    assert!(declared.len() > 40, "{declared:?}");
}

#[test]
fn label_values_are_escaped() {
    let mut s = stats();
    s.ports[0].name = "a\"b\\c\nd".into();
    let text = render(&s, &info());
    assert!(
        text.contains("lbd_port_rx_packets_total{port_id=\"0\",name=\"a\\\"b\\\\c\\nd\"} 150\n"),
        "{text}"
    );
    // No raw newline inside a sample: every line is a comment or a sample.
    assert!(text.lines().all(|l| l.starts_with('#') || l.starts_with("lbd_")));
}

#[test]
fn nothing_to_report_is_still_valid_text() {
    let text = render(&pb::GetStatsResponse::default(), &pb::GetInfoResponse::default());
    let m = samples(&text);
    assert_eq!(m["lbd_revision{}"], 0.0);
    assert!(!m.keys().any(|k| k.starts_with("lbd_drops_total")));
}
