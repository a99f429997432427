//! `lbctl`'s output: aligned tables for people, JSON and YAML for scripts.
//!
//! The JSON/YAML records use the services file's field names and values
//! (`mode = "fullnat"`, `address = "10.0.0.100:80"`, `type =
//! "load-balancer"`), plus `source`, so what `get` prints reads like what
//! `apply -f` takes.

use std::fmt::Write as _;
use std::net::IpAddr;

use lb_proto::v1 as pb;
use serde::Serialize;

use crate::convert;
use crate::model::{endpoint, BackendState, FrontendType, Mode, Protocol, Source, TrafficPolicy};
use crate::services_file::format_duration;

/// `-o` of `get` and `info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Aligned columns.
    #[default]
    Table,
    /// A JSON array (or object).
    Json,
    /// A YAML sequence (or mapping).
    Yaml,
}

/// Why output could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// JSON encoding failed.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// YAML encoding failed.
    #[error("YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
}

/// A proto enum value as `lbctl` shows it: by the model's name when this
/// lbctl knows the number, as `unknown(N)` when it does not (a newer lbd
/// sent it). A listing shows what the server holds, so it never fails on
/// one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown<T> {
    /// A number this lbctl knows.
    Known(T),
    /// A number it does not know.
    Unknown(i32),
}

impl<T> Shown<T> {
    /// `v` through `from` (a `convert::*_from_proto`); unknown if it fails.
    fn of<E>(v: i32, from: impl FnOnce(i32) -> Result<T, E>) -> Shown<T> {
        from(v).map_or(Shown::Unknown(v), Shown::Known)
    }
}

impl<T: Serialize> Serialize for Shown<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Shown::Known(t) => t.serialize(s),
            Shown::Unknown(n) => s.collect_str(&format_args!("unknown({n})")),
        }
    }
}

/// A service as `get services` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceRow {
    /// `namespace/name`.
    pub name: String,
    /// `fullnat` or `dnat`.
    pub mode: Shown<Mode>,
    /// `cluster` or `local`.
    pub traffic_policy: Shown<TrafficPolicy>,
    /// e.g. `3h`; none without affinity.
    pub session_affinity_timeout: Option<String>,
    /// CIDRs.
    pub source_ranges: Vec<String>,
    /// Frontends of the service in the listing.
    pub frontends: usize,
    /// Backends of the service in the listing.
    pub backends: usize,
    /// Who wrote it.
    pub source: Shown<Source>,
}

/// A frontend as `get frontends` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrontendRow {
    /// `10.0.0.100:80`.
    pub address: String,
    /// `tcp` or `udp`.
    pub protocol: Shown<Protocol>,
    /// e.g. `load-balancer`.
    #[serde(rename = "type")]
    pub kind: Shown<FrontendType>,
    /// The owning service.
    pub service: String,
    /// Who wrote it.
    pub source: Shown<Source>,
}

/// A backend as `get backends` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendRow {
    /// The service.
    pub service: String,
    /// `10.1.0.11:8080`.
    pub address: String,
    /// Weight.
    pub weight: u32,
    /// e.g. `terminating`: the state its source wrote.
    pub state: Shown<BackendState>,
    /// The state an operator set (`lbctl backend ...`), which takes
    /// precedence over `state`; `None`: none.
    pub operator_state: Option<Shown<BackendState>>,
    /// Node name.
    pub node: Option<String>,
    /// Zone.
    pub zone: Option<String>,
    /// Who wrote it.
    pub source: Shown<Source>,
}

// The rows show what the server sent without validating it: a listing of
// an lbd newer than this lbctl (an enum number added since), or older (an
// object the model refuses since), shows every object rather than failing
// on one. Enums are shown by `Shown`; strings as they are (the table
// escapes control characters, JSON and YAML escape them their own way);
// the UNSPECIFIED defaults are those of `convert`.

fn source(v: i32) -> Shown<Source> {
    Shown::of(v, |v| convert::source_from_proto(v, "", ""))
}

fn backend_state(v: i32) -> Shown<BackendState> {
    Shown::of(v, |v| convert::backend_state_from_proto(v, "", ""))
}

fn label(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// `ADDR:PORT` from the server's address text and port: as the model
/// writes it (`[fd00::1]:80`) when both are valid, as sent otherwise.
fn endpoint_text(addr: &str, port: u32) -> String {
    match (addr.parse::<IpAddr>(), u16::try_from(port)) {
        (Ok(a), Ok(p)) => endpoint(a, p),
        (Ok(IpAddr::V6(_)), Err(_)) => format!("[{addr}]:{port}"),
        _ => format!("{addr}:{port}"),
    }
}

/// The rows of a List response.
pub fn service_rows(l: &pb::ListResponse) -> Vec<ServiceRow> {
    l.services
        .iter()
        .map(|s| {
            service_row(
                s,
                l.frontends.iter().filter(|f| f.service == s.name).count(),
                l.backends.iter().filter(|b| b.service == s.name).count(),
            )
        })
        .collect()
}

/// The row of service `s`, with its counts of frontends and backends.
fn service_row(s: &pb::Service, frontends: usize, backends: usize) -> ServiceRow {
    ServiceRow {
        name: s.name.clone(),
        mode: Shown::of(s.mode, |v| convert::mode_from_proto(v, "")),
        traffic_policy: Shown::of(s.traffic_policy, |v| convert::policy_from_proto(v, "")),
        session_affinity_timeout: (s.session_affinity_timeout_seconds != 0)
            .then(|| format_duration(s.session_affinity_timeout_seconds)),
        source_ranges: s.source_ranges.clone(),
        frontends,
        backends,
        source: source(s.source),
    }
}

/// The frontend rows of a List response.
pub fn frontend_rows(l: &pb::ListResponse) -> Vec<FrontendRow> {
    l.frontends.iter().map(frontend_row).collect()
}

fn frontend_row(f: &pb::Frontend) -> FrontendRow {
    FrontendRow {
        address: endpoint_text(&f.address, f.port),
        protocol: Shown::of(f.protocol, |v| convert::protocol_from_proto(v, "")),
        kind: Shown::of(f.r#type, |v| convert::frontend_type_from_proto(v, "")),
        service: f.service.clone(),
        source: source(f.source),
    }
}

/// The backend rows of a List response.
pub fn backend_rows(l: &pb::ListResponse) -> Vec<BackendRow> {
    l.backends.iter().map(backend_row).collect()
}

fn backend_row(b: &pb::Backend) -> BackendRow {
    BackendRow {
        service: b.service.clone(),
        address: endpoint_text(&b.address, b.port),
        weight: b.weight.unwrap_or(1),
        state: backend_state(b.state),
        operator_state: (b.operator_state != 0).then(|| backend_state(b.operator_state)),
        node: label(&b.node),
        zone: label(&b.zone),
        source: source(b.source),
    }
}

/// One commit as `lbctl watch` prints it for people: its revision, source
/// and number of changes, then a line per change as committed.
pub fn watch_event_text(e: &pb::WatchEvent) -> String {
    let n = e.changes.len();
    let mut s = format!(
        "revision {} ({}): {n} change{}\n",
        e.revision,
        name(&source(e.source)),
        if n == 1 { "" } else { "s" }
    );
    for c in &e.changes {
        let _ = writeln!(s, "  {}", change_text(c));
    }
    s
}

fn change_text(c: &pb::Change) -> String {
    use pb::change::Change as C;
    match &c.change {
        Some(C::UpsertService(x)) => {
            let r = service_row(x, 0, 0);
            let mut t = format!(
                "upsert service {}: {}, policy {}",
                cell(&r.name),
                name(&r.mode),
                name(&r.traffic_policy)
            );
            if let Some(a) = &r.session_affinity_timeout {
                let _ = write!(t, ", client-IP affinity {a}");
            }
            if !r.source_ranges.is_empty() {
                let _ = write!(t, ", source ranges {}", cell(&r.source_ranges.join(",")));
            }
            t
        }
        Some(C::UpsertFrontend(x)) => {
            let r = frontend_row(x);
            format!(
                "upsert frontend {}/{} ({}) of {}",
                cell(&r.address),
                name(&r.protocol),
                name(&r.kind),
                cell(&r.service)
            )
        }
        Some(C::UpsertBackend(x)) => {
            let r = backend_row(x);
            // The state in effect, an operator's marked, as `get` shows it.
            let state = match &r.operator_state {
                Some(o) => format!("{} (operator)", name(o)),
                None => name(&r.state),
            };
            let mut t = format!(
                "upsert backend {} of {}: weight {}, {state}",
                cell(&r.address),
                cell(&r.service),
                r.weight
            );
            for (what, v) in [("node", &r.node), ("zone", &r.zone)] {
                if let Some(v) = v {
                    let _ = write!(t, ", {what} {}", cell(v));
                }
            }
            t
        }
        Some(C::DeleteService(n)) => format!("delete service {}", cell(n)),
        Some(C::DeleteFrontend(k)) => format!(
            "delete frontend {}/{}",
            cell(&endpoint_text(&k.address, k.port)),
            name(&Shown::of(k.protocol, |v| convert::protocol_from_proto(v, "")))
        ),
        Some(C::DeleteBackend(k)) => format!(
            "delete backend {} of {}",
            cell(&endpoint_text(&k.address, k.port)),
            cell(&k.service)
        ),
        // Also a kind of change a newer lbd added.
        None => "(a change this lbctl does not know)".to_string(),
    }
}

/// One commit as `lbctl watch -o json|yaml` prints it: `revision`,
/// `source` and `changes`, each `{"upsert"|"delete": kind, ...}` with the
/// object as `get` prints it (without a service's counts) or its key.
pub fn watch_event_value(e: &pb::WatchEvent) -> serde_json::Value {
    use pb::change::Change as C;
    use serde_json::json;
    let changes: Vec<serde_json::Value> = e
        .changes
        .iter()
        .map(|c| match &c.change {
            Some(C::UpsertService(x)) => {
                let mut v = serde_json::to_value(service_row(x, 0, 0)).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.remove("frontends");
                    o.remove("backends");
                }
                json!({"upsert": "service", "service": v})
            }
            Some(C::UpsertFrontend(x)) => json!({"upsert": "frontend", "frontend": frontend_row(x)}),
            Some(C::UpsertBackend(x)) => json!({"upsert": "backend", "backend": backend_row(x)}),
            Some(C::DeleteService(n)) => json!({"delete": "service", "name": n}),
            Some(C::DeleteFrontend(k)) => json!({
                "delete": "frontend",
                "address": endpoint_text(&k.address, k.port),
                "protocol": Shown::of(k.protocol, |v| convert::protocol_from_proto(v, "")),
            }),
            Some(C::DeleteBackend(k)) => json!({
                "delete": "backend",
                "service": k.service,
                "address": endpoint_text(&k.address, k.port),
            }),
            // Also a kind of change a newer lbd added.
            None => json!({"unknown": true}),
        })
        .collect();
    json!({"revision": e.revision, "source": source(e.source), "changes": changes})
}

/// Columns padded to their widest cell, two spaces apart, no trailing
/// blanks; the header is upper case.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(|c| cell(c)).collect()).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = String>| {
        let mut l = String::new();
        for (i, c) in cells.enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let pad = widths
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(c.chars().count());
            l.push_str(&c);
            l.push_str(&" ".repeat(pad));
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().map(|h| h.to_uppercase()));
    for r in rows {
        line(&mut r.into_iter());
    }
    out
}

/// A table cell: as it is, or quoted and escaped if it holds a control
/// character, so that a string from the server cannot break the table's
/// lines or send control sequences to the terminal.
fn cell(s: &str) -> String {
    if s.chars().any(char::is_control) {
        format!("{s:?}")
    } else {
        s.to_string()
    }
}

fn or_dash(s: &Option<String>) -> String {
    s.clone().unwrap_or_else(|| "-".into())
}

fn list_or_dash(v: &[String]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

fn name<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".into(),
    }
}

/// Renders rows as a table, JSON or YAML.
pub fn render<T: Serialize>(
    rows: &[T],
    format: Format,
    to_table: impl Fn(&[T]) -> String,
) -> Result<String, OutputError> {
    Ok(match format {
        Format::Table => to_table(rows),
        Format::Json => serde_json::to_string_pretty(rows)? + "\n",
        Format::Yaml => serde_yaml::to_string(rows)?,
    })
}

/// The `get services` table.
pub fn services_table(rows: &[ServiceRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                name(&r.mode),
                name(&r.traffic_policy),
                or_dash(&r.session_affinity_timeout),
                list_or_dash(&r.source_ranges),
                r.frontends.to_string(),
                r.backends.to_string(),
                name(&r.source),
            ]
        })
        .collect();
    table(
        &[
            "name",
            "mode",
            "policy",
            "affinity",
            "source-ranges",
            "frontends",
            "backends",
            "source",
        ],
        &cells,
    )
}

/// The `get frontends` table.
pub fn frontends_table(rows: &[FrontendRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.address.clone(),
                name(&r.protocol),
                name(&r.kind),
                r.service.clone(),
                name(&r.source),
            ]
        })
        .collect();
    table(&["address", "protocol", "type", "service", "source"], &cells)
}

/// The `get backends` table.
pub fn backends_table(rows: &[BackendRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.service.clone(),
                r.address.clone(),
                r.weight.to_string(),
                // The state in effect; an operator's is marked, since its
                // source's state no longer decides.
                match r.operator_state {
                    Some(s) => format!("{} (operator)", name(&s)),
                    None => name(&r.state),
                },
                or_dash(&r.node),
                or_dash(&r.zone),
                name(&r.source),
            ]
        })
        .collect();
    table(
        &["service", "address", "weight", "state", "node", "zone", "source"],
        &cells,
    )
}

fn key_text(k: &Option<pb::FrontendKey>) -> String {
    match k
        .as_ref()
        .map(|k| convert::frontend_key_from_proto(k, "frontend"))
    {
        Some(Ok(k)) => k.to_string(),
        _ => "?".into(),
    }
}

fn backend_text(k: &Option<pb::BackendKey>) -> (String, String) {
    match k {
        Some(k) => (
            k.service.clone(),
            match k.address.parse() {
                Ok(a) => endpoint(a, u16::try_from(k.port).unwrap_or(0)),
                Err(_) => k.address.clone(),
            },
        ),
        None => ("?".into(), "?".into()),
    }
}

/// Per-second rates between two GetStats samples, keyed like the rows.
#[derive(Debug, Clone, Default)]
pub struct Rates {
    /// Seconds between the samples.
    pub seconds: f64,
    /// The earlier sample.
    pub previous: pb::GetStatsResponse,
}

fn rate(now: u64, before: Option<u64>, secs: f64) -> String {
    match before {
        Some(b) if secs > 0.0 => format!("{:.0}", now.saturating_sub(b) as f64 / secs),
        _ => "-".into(),
    }
}

/// The control thread's counters, one a row; with `rates`, per second
/// since the previous sample (none for the gauges).
fn control_table(c: &pb::ControlStats, rates: Option<&Rates>) -> String {
    let p = rates.and_then(|r| r.previous.control);
    // (name, value, value in the previous sample)
    let counters = [
        ("arp-requests", c.arp_requests, p.map(|p| p.arp_requests)),
        ("gratuitous-arps", c.gratuitous_arps, p.map(|p| p.gratuitous_arps)),
        (
            "neighbor-solicitations",
            c.neighbor_solicitations,
            p.map(|p| p.neighbor_solicitations),
        ),
        ("unsolicited-nas", c.unsolicited_nas, p.map(|p| p.unsolicited_nas)),
        ("held", c.held, p.map(|p| p.held)),
        ("released", c.released, p.map(|p| p.released)),
        ("neighbor-drops", c.neighbor_drops, p.map(|p| p.neighbor_drops)),
        ("send-failures", c.send_failures, p.map(|p| p.send_failures)),
    ];
    let gauges = [
        ("neighbors", c.neighbors),
        ("neighbor-entries", c.neighbor_entries),
    ];
    let mut cells: Vec<Vec<String>> = counters
        .into_iter()
        .map(|(name, now, before)| {
            let mut v = vec![name.to_string(), now.to_string()];
            if let Some(r) = rates {
                v.push(rate(now, before, r.seconds));
            }
            v
        })
        .collect();
    cells.extend(gauges.map(|(name, now)| vec![name.to_string(), now.to_string()]));
    let mut h = vec!["control", "count"];
    if rates.is_some() {
        h.push("count/s");
    }
    table(&h, &cells)
}

/// What `apply` prints for `sent` changes: the revision, and what the
/// request added, updated, left unchanged and removed.
pub fn applied_text(r: &pb::ApplyResponse, sent: usize) -> String {
    if r.added == 0 && r.updated == 0 && r.removed == 0 && r.unchanged == 0 && sent > 0 {
        // An lbd from before the counts.
        return format!("revision {}: applied {sent} changes\n", r.revision);
    }
    if r.added == 0 && r.updated == 0 && r.removed == 0 {
        return format!(
            "revision {}: nothing changed ({} unchanged)\n",
            r.revision, r.unchanged
        );
    }
    format!(
        "revision {}: {} added, {} updated, {} unchanged, {} removed\n",
        r.revision, r.added, r.updated, r.unchanged, r.removed
    )
}

/// The `stats` report: workers, ports, the control thread, frontends,
/// backends, drops. With `rates`, per-second rates since the previous
/// sample are added.
pub fn stats_text(s: &pb::GetStatsResponse, rates: Option<&Rates>) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "revision {}, conntrack entries {}",
        s.revision, s.conntrack_entries
    );
    if s.affinity_table_size > 0 {
        let _ = write!(
            out,
            ", affinity pins {} of {}",
            s.affinity_live_pins, s.affinity_table_size
        );
    }
    out.push('\n');
    // Normally 0 on every worker: a column only when it is not, as on
    // lbd's exit line.
    let overflow = s.workers.iter().any(|w| w.slot_overflow > 0);
    let workers: Vec<Vec<String>> = s
        .workers
        .iter()
        .map(|w| {
            let mut v = vec![
                w.worker.to_string(),
                w.rx_packets.to_string(),
                w.tx_packets.to_string(),
            ];
            if let Some(r) = rates {
                let before = r.previous.workers.iter().find(|p| p.worker == w.worker);
                v.push(rate(w.rx_packets, before.map(|p| p.rx_packets), r.seconds));
            }
            v.extend([
                w.local_replies.to_string(),
                w.neighbor_updates.to_string(),
                w.resets_sent.to_string(),
                w.too_big_sent.to_string(),
                w.handed_over.to_string(),
                w.new_connections.to_string(),
                w.stateless_forwards.to_string(),
                w.conntrack_entries.to_string(),
                w.conntrack_evictions.to_string(),
                w.conntrack_expirations.to_string(),
                w.affinity_hits.to_string(),
                w.affinity_pins.to_string(),
                w.affinity_evictions.to_string(),
            ]);
            if overflow {
                v.push(w.slot_overflow.to_string());
            }
            v.push(w.drops.values().sum::<u64>().to_string());
            v
        })
        .collect();
    let mut h = vec!["worker", "rx", "tx"];
    if rates.is_some() {
        h.push("rx/s");
    }
    h.extend([
        "local",
        "nbr-updates",
        "resets",
        "too-big",
        "handed-over",
        "new-conns",
        "stateless",
        "ct-entries",
        "ct-evictions",
        "ct-expirations",
        "aff-hits",
        "aff-pins",
        "aff-evictions",
    ]);
    if overflow {
        h.push("slot-overflow");
    }
    h.push("drops");
    out.push('\n');
    out.push_str(&table(&h, &workers));

    if !s.ports.is_empty() {
        let ports: Vec<Vec<String>> = s
            .ports
            .iter()
            .map(|p| {
                let mut v = vec![p.id.to_string(), p.name.clone(), p.rx_packets.to_string()];
                if let Some(r) = rates {
                    let before = r.previous.ports.iter().find(|q| q.id == p.id);
                    v.push(rate(p.rx_packets, before.map(|q| q.rx_packets), r.seconds));
                }
                v.extend([
                    p.tx_packets.to_string(),
                    p.imissed.to_string(),
                    p.ierrors.to_string(),
                    p.oerrors.to_string(),
                    p.rx_nombuf.to_string(),
                ]);
                v
            })
            .collect();
        let mut h = vec!["port", "name", "rx"];
        if rates.is_some() {
            h.push("rx/s");
        }
        h.extend(["tx", "imissed", "ierrors", "oerrors", "rx-nombuf"]);
        out.push('\n');
        out.push_str(&table(&h, &ports));
    }

    if let Some(c) = &s.control {
        out.push('\n');
        out.push_str(&control_table(c, rates));
    }

    let frontends: Vec<Vec<String>> = s
        .frontends
        .iter()
        .map(|f| {
            let st = f.stats.unwrap_or_default();
            let mut v = vec![key_text(&f.frontend), f.service.clone(), st.packets.to_string()];
            if let Some(r) = rates {
                let before = r
                    .previous
                    .frontends
                    .iter()
                    .find(|p| p.frontend == f.frontend)
                    .map(|p| p.stats.unwrap_or_default().packets);
                v.push(rate(st.packets, before, r.seconds));
            }
            v.extend([st.bytes.to_string(), st.connections.to_string()]);
            v
        })
        .collect();
    let mut h = vec!["frontend", "service", "packets"];
    if rates.is_some() {
        h.push("packets/s");
    }
    h.extend(["bytes", "connections"]);
    out.push('\n');
    out.push_str(&table(&h, &frontends));

    let backends: Vec<Vec<String>> = s
        .backends
        .iter()
        .map(|b| {
            let st = b.stats.unwrap_or_default();
            let (svc, addr) = backend_text(&b.backend);
            let mut v = vec![svc, addr, st.packets.to_string()];
            if let Some(r) = rates {
                let before = r
                    .previous
                    .backends
                    .iter()
                    .find(|p| p.backend == b.backend)
                    .map(|p| p.stats.unwrap_or_default().packets);
                v.push(rate(st.packets, before, r.seconds));
            }
            v.extend([st.bytes.to_string(), st.connections.to_string()]);
            v
        })
        .collect();
    let mut h = vec!["service", "backend", "packets"];
    if rates.is_some() {
        h.push("packets/s");
    }
    h.extend(["bytes", "connections"]);
    out.push('\n');
    out.push_str(&table(&h, &backends));

    if !s.drops.is_empty() {
        let mut drops: Vec<(&String, &u64)> = s.drops.iter().collect();
        drops.sort();
        let cells: Vec<Vec<String>> = drops
            .into_iter()
            .map(|(k, v)| vec![k.clone(), v.to_string()])
            .collect();
        out.push('\n');
        out.push_str(&table(&["drop reason", "packets"], &cells));
    }
    out
}

/// The `info` report as a JSON value (for `-o json|yaml`).
pub fn info_value(i: &pb::GetInfoResponse) -> serde_json::Value {
    serde_json::json!({
        "version": i.version,
        "instance_id": i.instance_id,
        "revision": i.revision,
        "published_revision": i.published_revision,
        "last_publish_micros": i.last_publish_micros,
        "workers": i.workers,
        "snat_addresses": i.snat_addresses,
        "ports": i.ports.iter().map(|p| serde_json::json!({
            "id": p.id,
            "name": p.name,
            "driver": p.driver,
            "mac": p.mac,
            "link_up": p.link_up,
            "speed_mbps": p.speed_mbps,
            "rx_ipv4_checksum_offload": p.rx_ipv4_checksum_offload,
            "tx_ipv4_checksum_offload": p.tx_ipv4_checksum_offload,
            "vlan": p.vlan,
            "mtu": p.mtu,
            "addresses": p.addresses,
        })).collect::<Vec<_>>(),
    })
}

/// The `info` report as text.
pub fn info_text(i: &pb::GetInfoResponse) -> String {
    let mut out = table(
        &["", ""],
        &[
            vec!["version".into(), i.version.clone()],
            vec!["instance".into(), i.instance_id.clone()],
            vec!["revision".into(), i.revision.to_string()],
            vec!["published revision".into(), i.published_revision.to_string()],
            vec!["last publish".into(), format!("{} µs", i.last_publish_micros)],
            vec!["workers".into(), i.workers.to_string()],
            vec![
                "snat addresses".into(),
                if i.snat_addresses.is_empty() {
                    "-".into()
                } else {
                    i.snat_addresses.join(",")
                },
            ],
        ],
    );
    // The key/value block has no header.
    out = out
        .split_once('\n')
        .map(|(_, rest)| rest.to_string())
        .unwrap_or(out);
    if !i.ports.is_empty() {
        let cells: Vec<Vec<String>> = i
            .ports
            .iter()
            .map(|p| {
                vec![
                    p.id.to_string(),
                    p.name.clone(),
                    p.driver.clone(),
                    p.mac.clone(),
                    if p.link_up { "up" } else { "down" }.into(),
                    if p.speed_mbps == 0 {
                        "-".into()
                    } else {
                        format!("{} Mb/s", p.speed_mbps)
                    },
                    match (p.rx_ipv4_checksum_offload, p.tx_ipv4_checksum_offload) {
                        (true, true) => "rx,tx",
                        (true, false) => "rx",
                        (false, true) => "tx",
                        (false, false) => "-",
                    }
                    .into(),
                    match p.vlan {
                        0 => "-".into(),
                        v => v.to_string(),
                    },
                    p.mtu.to_string(),
                    if p.addresses.is_empty() {
                        "-".into()
                    } else {
                        p.addresses.join(",")
                    },
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(
            &[
                "port",
                "name",
                "driver",
                "mac",
                "link",
                "speed",
                "ip csum offload",
                "vlan",
                "mtu",
                "addresses",
            ],
            &cells,
        ));
    }
    out
}

/// The source names `--source` accepts.
pub fn parse_source(s: &str) -> Result<Source, String> {
    match s {
        "k8s" => Ok(Source::K8s),
        "api" => Ok(Source::Api),
        "config" => Ok(Source::Config),
        _ => Err(format!("{s:?} is not a source (k8s, api or config)")),
    }
}

#[cfg(test)]
mod tests {
    /// `watch`'s lines for the kinds `lbctl watch`'s test does not send:
    /// a service with ranges, a frontend delete, a name to escape, and a
    /// change this lbctl does not know (a newer lbd's), in text and JSON.
    #[test]
    fn watch_events_in_text_and_json() {
        use super::pb;
        use pb::change::Change as C;
        let e = pb::WatchEvent {
            revision: 9,
            source: pb::Source::K8s.into(),
            changes: vec![
                pb::Change {
                    change: Some(C::UpsertService(pb::Service {
                        name: "default/web".into(),
                        source_ranges: vec!["10.0.0.0/8".into(), "fd00::/8".into()],
                        ..Default::default()
                    })),
                },
                pb::Change {
                    change: Some(C::DeleteFrontend(pb::FrontendKey {
                        address: "fd00::1".into(),
                        port: 80,
                        protocol: pb::Protocol::Udp.into(),
                    })),
                },
                pb::Change {
                    change: Some(C::DeleteService("a\nb".into())),
                },
                pb::Change { change: None },
                pb::Change {
                    change: Some(C::UpsertBackend(pb::Backend {
                        service: "default/web".into(),
                        address: "10.1.0.11".into(),
                        port: 8080,
                        operator_state: pb::BackendState::Maintenance.into(),
                        zone: "z1".into(),
                        ..Default::default()
                    })),
                },
            ],
        };
        assert_eq!(
            super::watch_event_text(&e),
            "revision 9 (k8s): 5 changes\n  \
             upsert service default/web: fullnat, policy cluster, source ranges 10.0.0.0/8,fd00::/8\n  \
             delete frontend [fd00::1]:80/udp\n  \
             delete service \"a\\nb\"\n  \
             (a change this lbctl does not know)\n  \
             upsert backend 10.1.0.11:8080 of default/web: weight 1, maintenance (operator), zone z1\n"
        );
        let v = super::watch_event_value(&e);
        assert_eq!(
            v["changes"][1],
            serde_json::json!({"delete": "frontend", "address": "[fd00::1]:80", "protocol": "udp"})
        );
        assert_eq!(v["changes"][3], serde_json::json!({"unknown": true}));
        assert!(v["changes"][0]["service"].get("frontends").is_none(), "{v}");
    }

    #[test]
    fn applied_text_says_what_changed() {
        let mut r = super::pb::ApplyResponse {
            revision: 7,
            unchanged: 12,
            ..Default::default()
        };
        assert_eq!(
            super::applied_text(&r, 12),
            "revision 7: nothing changed (12 unchanged)\n"
        );
        r.added = 2;
        r.updated = 1;
        r.removed = 3;
        assert_eq!(
            super::applied_text(&r, 18),
            "revision 7: 2 added, 1 updated, 12 unchanged, 3 removed\n"
        );
        // An lbd that does not count answers with the revision alone.
        let old = super::pb::ApplyResponse {
            revision: 8,
            ..Default::default()
        };
        assert_eq!(super::applied_text(&old, 5), "revision 8: applied 5 changes\n");
        assert_eq!(
            super::applied_text(&old, 0),
            "revision 8: nothing changed (0 unchanged)\n"
        );
    }

    use super::*;

    #[test]
    fn tables_align_without_trailing_blanks() {
        let t = table(
            &["name", "x"],
            &[
                vec!["default/web".into(), "1".into()],
                vec!["a/b".into(), "".into()],
            ],
        );
        assert_eq!(t, "NAME         X\ndefault/web  1\na/b\n");
    }

    fn listing() -> pb::ListResponse {
        let s = crate::model::Service {
            name: "default/web".into(),
            mode: Mode::FullNat,
            traffic_policy: TrafficPolicy::Cluster,
            affinity_timeout_seconds: Some(10_800),
            source_ranges: vec!["10.0.0.0/8".parse().unwrap()],
            source: Source::Api,
        };
        pb::ListResponse {
            services: vec![convert::service_to_proto(&s)],
            frontends: vec![pb::Frontend {
                service: "default/web".into(),
                address: "fd00::100".into(),
                port: 80,
                protocol: 1,
                r#type: 3,
                source: 2,
            }],
            backends: vec![
                pb::Backend {
                    service: "default/web".into(),
                    address: "10.1.0.11".into(),
                    port: 8080,
                    weight: Some(2),
                    state: 2,
                    node: "node-1".into(),
                    zone: "".into(),
                    source: 3,
                    operator_state: 0,
                },
                pb::Backend {
                    service: "default/web".into(),
                    address: "10.1.0.12".into(),
                    port: 8080,
                    weight: Some(1),
                    state: 1,
                    source: 3,
                    operator_state: 4,
                    ..Default::default()
                },
            ],
            revision: 4,
        }
    }

    #[test]
    fn rows_tables_json_yaml() {
        let l = listing();
        let s = service_rows(&l);
        assert_eq!(
            services_table(&s),
            "NAME         MODE     POLICY   AFFINITY  SOURCE-RANGES  FRONTENDS  BACKENDS  SOURCE\n\
             default/web  fullnat  cluster  3h        10.0.0.0/8     1          2         api\n"
        );
        let f = frontend_rows(&l);
        assert_eq!(
            frontends_table(&f),
            "ADDRESS         PROTOCOL  TYPE           SERVICE      SOURCE\n\
             [fd00::100]:80  tcp       load-balancer  default/web  api\n"
        );
        let b = backend_rows(&l);
        let text = render(&b, Format::Table, backends_table).unwrap();
        assert_eq!(
            text,
            "SERVICE      ADDRESS         WEIGHT  STATE                   NODE    ZONE  SOURCE\n\
             default/web  10.1.0.11:8080  2       terminating             node-1  -     config\n\
             default/web  10.1.0.12:8080  1       maintenance (operator)  -       -     config\n"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&b, Format::Json, backends_table).unwrap()).unwrap();
        assert_eq!(json[0]["state"], "terminating");
        assert_eq!(json[0]["address"], "10.1.0.11:8080");
        assert_eq!(json[0]["zone"], serde_json::Value::Null);
        assert_eq!(json[0]["operator_state"], serde_json::Value::Null);
        assert_eq!(
            (&json[1]["state"], &json[1]["operator_state"]),
            (&"active".into(), &"maintenance".into())
        );
        let yaml = render(&f, Format::Yaml, frontends_table).unwrap();
        assert!(yaml.contains("type: load-balancer"), "{yaml}");
        let json: serde_json::Value =
            serde_json::from_str(&render(&s, Format::Json, services_table).unwrap()).unwrap();
        assert_eq!(json[0]["session_affinity_timeout"], "3h");
        assert_eq!(json[0]["mode"], "fullnat");
    }

    /// Objects this lbctl would not accept (enum numbers of a newer lbd,
    /// objects an older one still holds) are all listed as they are: an
    /// unknown number as `unknown(N)`, a string with control characters
    /// escaped in the table.
    #[test]
    fn objects_this_lbctl_cannot_validate_are_listed() {
        let mut l = listing();
        l.services.push(pb::Service {
            name: "web\n\u{1b}[31m".into(),
            mode: 7,
            traffic_policy: 8,
            session_affinity_timeout_seconds: 999_999,
            source_ranges: vec!["10.0.0.1".into()],
            source: 9,
        });
        l.frontends.push(pb::Frontend {
            service: "default/web".into(),
            address: "not-an-address".into(),
            port: 70_000,
            protocol: 5,
            r#type: 7,
            source: 2,
        });
        l.backends.push(pb::Backend {
            service: "default/web".into(),
            address: "127.0.0.1".into(),
            port: 8080,
            weight: Some(1_000_000),
            state: 7,
            operator_state: 9,
            node: "n\u{7}".into(),
            ..Default::default()
        });
        let s = service_rows(&l);
        let t = services_table(&s);
        assert_eq!(t.lines().count(), 3, "{t}");
        assert!(
            t.ends_with(
                "\"web\\n\\u{1b}[31m\"  unknown(7)  unknown(8)  11d13h46m39s  10.0.0.1       0          0         unknown(9)\n"
            ),
            "{t}"
        );
        let f = frontend_rows(&l);
        let t = frontends_table(&f);
        assert_eq!(t.lines().count(), 3, "{t}");
        assert!(
            t.ends_with("not-an-address:70000  unknown(5)  unknown(7)     default/web  api\n"),
            "{t}"
        );
        let b = backend_rows(&l);
        let t = backends_table(&b);
        assert_eq!(t.lines().count(), 4, "{t}");
        assert!(
            t.ends_with(
                "default/web  127.0.0.1:8080  1000000  unknown(9) (operator)   \"n\\u{7}\"  -     api\n"
            ),
            "{t}"
        );
        for t in [services_table(&s), frontends_table(&f), backends_table(&b)] {
            assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&render(&b, Format::Json, backends_table).unwrap()).unwrap();
        assert_eq!(
            (&json[2]["state"], &json[2]["operator_state"], &json[2]["node"]),
            (&"unknown(7)".into(), &"unknown(9)".into(), &"n\u{7}".into())
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&s, Format::Json, services_table).unwrap()).unwrap();
        assert_eq!(json[1]["name"], "web\n\u{1b}[31m", "JSON escapes it itself");
        assert_eq!(json[1]["mode"], "unknown(7)");
        let yaml = render(&f, Format::Yaml, frontends_table).unwrap();
        assert!(yaml.contains("type: unknown(7)"), "{yaml}");
        let yaml = render(&s, Format::Yaml, services_table).unwrap();
        assert!(!yaml.chars().any(|c| c.is_control() && c != '\n'), "{yaml:?}");
    }

    #[test]
    fn stats_and_info_render() {
        let mut s = pb::GetStatsResponse {
            revision: 3,
            conntrack_entries: 10,
            ..Default::default()
        };
        s.workers.push(pb::WorkerStats {
            worker: 0,
            rx_packets: 100,
            resets_sent: 7,
            too_big_sent: 3,
            neighbor_updates: 11,
            affinity_hits: 13,
            ..Default::default()
        });
        s.drops.insert("no-backend".into(), 5);
        s.ports.push(pb::PortStats {
            id: 0,
            name: "net_null0".into(),
            rx_packets: 90,
            imissed: 7,
            ..Default::default()
        });
        let t = stats_text(&s, None);
        assert!(!t.contains("CONTROL"), "no section without control counters: {t}");
        let header = t.lines().find(|l| l.starts_with("WORKER")).unwrap();
        let row = t.lines().find(|l| l.starts_with("0 ")).unwrap();
        let resets = header.split_whitespace().position(|h| h == "RESETS").unwrap();
        assert_eq!(row.split_whitespace().nth(resets), Some("7"), "{t}");
        let too_big = header.split_whitespace().position(|h| h == "TOO-BIG").unwrap();
        assert_eq!(row.split_whitespace().nth(too_big), Some("3"), "{t}");
        let column = |t: &str, name: &str| {
            let header = t.lines().find(|l| l.starts_with("WORKER")).unwrap();
            let row = t.lines().find(|l| l.starts_with("0 ")).unwrap();
            let at = header.split_whitespace().position(|h| h == name)?;
            row.split_whitespace().nth(at).map(str::to_owned)
        };
        assert_eq!(column(&t, "NBR-UPDATES").as_deref(), Some("11"), "{t}");
        assert_eq!(column(&t, "AFF-HITS").as_deref(), Some("13"), "{t}");
        assert_eq!(column(&t, "SLOT-OVERFLOW"), None, "only when not 0: {t}");
        let mut overflowed = s.clone();
        overflowed.workers[0].slot_overflow = 17;
        overflowed.workers.push(pb::WorkerStats {
            worker: 1,
            ..Default::default()
        });
        let t = stats_text(&overflowed, None);
        assert_eq!(column(&t, "SLOT-OVERFLOW").as_deref(), Some("17"), "{t}");
        assert_eq!(column(&t, "DROPS").as_deref(), Some("0"), "{t}");
        assert!(
            t.lines()
                .any(|l| l.starts_with("1 ") && l.split_whitespace().count() == 18),
            "a worker without overflow still has the column: {t}"
        );
        assert!(t.starts_with("revision 3, conntrack entries 10\n"), "{t}");
        s.affinity_live_pins = 5;
        s.affinity_table_size = 1024;
        let t = stats_text(&s, None);
        assert!(
            t.starts_with("revision 3, conntrack entries 10, affinity pins 5 of 1024\n"),
            "{t}"
        );
        s.affinity_table_size = 0;
        s.control = Some(pb::ControlStats {
            arp_requests: 4,
            held: 12,
            released: 9,
            neighbor_drops: 3,
            neighbors: 2,
            neighbor_entries: 3,
            ..Default::default()
        });
        let t = stats_text(&s, None);
        assert!(t.starts_with("revision 3, conntrack entries 10\n"), "{t}");
        assert!(
            t.contains(
                "\nCONTROL                 COUNT\n\
                 arp-requests            4\n\
                 gratuitous-arps         0\n\
                 neighbor-solicitations  0\n\
                 unsolicited-nas         0\n\
                 held                    12\n\
                 released                9\n\
                 neighbor-drops          3\n\
                 send-failures           0\n\
                 neighbors               2\n\
                 neighbor-entries        3\n\n"
            ),
            "{t}"
        );
        assert!(t.contains("IMISSED"), "{t}");
        assert!(
            t.lines().any(|l| l.starts_with("0     net_null0  90  0   7")),
            "{t}"
        );
        assert!(t.contains("no-backend"), "{t}");
        let mut later = s.clone();
        later.workers[0].rx_packets = 300;
        if let Some(c) = &mut later.control {
            c.neighbor_drops = 23;
            c.neighbors = 5;
        }
        let t = stats_text(
            &later,
            Some(&Rates {
                seconds: 2.0,
                previous: s,
            }),
        );
        assert!(t.contains("RX/S"), "{t}");
        assert!(t.lines().any(|l| l.starts_with("0       300  0   100")), "{t}");
        assert!(t.contains("\nCONTROL                 COUNT  COUNT/S\n"), "{t}");
        assert!(t.contains("\nneighbor-drops          23     10\n"), "{t}");
        assert!(t.contains("\narp-requests            4      0\n"), "{t}");
        assert!(
            t.contains("\nneighbors               5\n"),
            "a gauge has no rate: {t}"
        );
        let i = pb::GetInfoResponse {
            version: "0.1.0".into(),
            revision: 7,
            ports: vec![pb::PortInfo {
                id: 0,
                name: "net_null0".into(),
                mac: crate::grpc::format_mac([2, 0, 0, 0, 0, 1]),
                link_up: true,
                rx_ipv4_checksum_offload: true,
                mtu: 1500,
                addresses: vec!["10.0.0.1/24".into(), "2001:db8::1/64".into()],
                ..Default::default()
            }],
            ..Default::default()
        };
        let t = info_text(&i);
        assert!(t.starts_with("version"), "{t}");
        assert!(t.contains("02:00:00:00:00:01"), "{t}");
        assert!(t.contains("IP CSUM OFFLOAD"), "{t}");
        assert!(
            t.lines()
                .last()
                .is_some_and(|l| l.split_whitespace().rev().take(4).eq([
                    "10.0.0.1/24,2001:db8::1/64",
                    "1500",
                    "-",
                    "rx"
                ])),
            "{t}"
        );
        let mut tagged = i.clone();
        tagged.ports[0].vlan = 100;
        let t = info_text(&tagged);
        assert!(t.contains("VLAN") && t.contains("MTU"), "{t}");
        assert!(
            t.lines()
                .last()
                .is_some_and(|l| l.split_whitespace().rev().take(4).eq([
                    "10.0.0.1/24,2001:db8::1/64",
                    "1500",
                    "100",
                    "rx"
                ])),
            "{t}"
        );
        assert_eq!(info_value(&tagged)["ports"][0]["vlan"], 100);
        assert_eq!(info_value(&tagged)["ports"][0]["mtu"], 1500);
        assert_eq!(
            info_value(&tagged)["ports"][0]["addresses"],
            serde_json::json!(["10.0.0.1/24", "2001:db8::1/64"])
        );
        let mut bare = i.clone();
        bare.ports[0].addresses.clear();
        assert!(
            info_text(&bare).lines().last().is_some_and(|l| l.ends_with(" -")),
            "{}",
            info_text(&bare)
        );
        assert_eq!(info_value(&i)["ports"][0]["rx_ipv4_checksum_offload"], true);
        assert_eq!(info_value(&i)["revision"], 7);
        assert!(t.contains("\nsnat addresses      -\n"), "{t}");
        let mut snat = i.clone();
        snat.snat_addresses = vec!["10.1.0.100".into(), "2001:db8:1::100".into()];
        let t = info_text(&snat);
        assert!(
            t.contains("\nsnat addresses      10.1.0.100,2001:db8:1::100\n"),
            "{t}"
        );
        assert_eq!(
            info_value(&snat)["snat_addresses"],
            serde_json::json!(["10.1.0.100", "2001:db8:1::100"])
        );
    }
}
