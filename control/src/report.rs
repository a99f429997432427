//! The GetStats and GetInfo answers, assembled from the plane and what lbd
//! reports ([`ServerInfo`]): shared by the gRPC service and the metrics
//! endpoint, so that both report the same counters.

use std::sync::Arc;

use lb_proto::v1 as pb;
use tonic::Status;

use crate::convert;
use crate::grpc::{format_mac, ServerInfo, SharedPlane};
use crate::plane::{ControlPlane, PlaneStats};

/// The status of a read that found the plane's lock poisoned.
pub(crate) fn poisoned() -> Status {
    Status::internal("control plane lock poisoned by an earlier panic; restart lbd")
}

/// Runs a read of the plane on the blocking pool: it may wait for a commit
/// (see [`crate::grpc`]).
pub(crate) async fn read<T, F>(plane: &SharedPlane, f: F) -> Result<T, Status>
where
    T: Send + 'static,
    F: FnOnce(&ControlPlane) -> Result<T, Status> + Send + 'static,
{
    let plane = Arc::clone(plane);
    tokio::task::spawn_blocking(move || {
        let p = plane.lock().map_err(|_| poisoned())?;
        f(&p)
    })
    .await
    .map_err(|e| {
        Status::internal(crate::grpc::clip_message(format!(
            "control plane task failed: {e}"
        )))
    })?
}

/// GetStats' answer: the plane's counters, the ports' (as last read), the
/// control thread's and the affinity table's occupancy.
pub async fn stats(plane: &SharedPlane, info: &ServerInfo) -> Result<pb::GetStatsResponse, Status> {
    let stats = read(plane, |p| Ok(p.stats())).await?;
    with_affinity(stats_from(stats, info), info).await
}

/// GetInfo's answer.
pub async fn info(plane: &SharedPlane, info: &ServerInfo) -> Result<pb::GetInfoResponse, Status> {
    let revisions = read(plane, |p| Ok(revisions(p))).await?;
    Ok(info_from(revisions, info))
}

/// Both answers, the plane read under one hold of its lock, so that the
/// revisions and the counters belong together (the metrics endpoint).
pub async fn both(
    plane: &SharedPlane,
    info: &ServerInfo,
) -> Result<(pb::GetStatsResponse, pb::GetInfoResponse), Status> {
    let (stats, revisions) = read(plane, |p| Ok((p.stats(), revisions(p)))).await?;
    let stats = with_affinity(stats_from(stats, info), info).await?;
    Ok((stats, info_from(revisions, info)))
}

/// The committed and published revisions and the last publication's time.
type Revisions = (u64, u64, std::time::Duration);

fn revisions(p: &ControlPlane) -> Revisions {
    (p.revision(), p.published_revision(), p.last_publish())
}

fn stats_from(stats: PlaneStats, info: &ServerInfo) -> pb::GetStatsResponse {
    let mut r = stats_to_proto(stats);
    r.ports = info
        .ports
        .iter()
        .map(|port| {
            let c = port.status.get().counters;
            pb::PortStats {
                id: port.id.into(),
                name: port.name.clone(),
                rx_packets: c.rx_packets,
                rx_bytes: c.rx_bytes,
                tx_packets: c.tx_packets,
                tx_bytes: c.tx_bytes,
                imissed: c.imissed,
                ierrors: c.ierrors,
                oerrors: c.oerrors,
                rx_nombuf: c.rx_nombuf,
            }
        })
        .collect();
    // Atomics: read here, without the plane's lock.
    r.control = Some(info.control.get());
    r
}

/// `r` with the affinity table's size and live pins.
async fn with_affinity(
    mut r: pb::GetStatsResponse,
    info: &ServerInfo,
) -> Result<pb::GetStatsResponse, Status> {
    if let Some(a) = info.affinity.clone() {
        r.affinity_table_size = a.table.capacity() as u64;
        // A walk of the whole table (16 bytes a pin): off the runtime.
        let live = tokio::task::spawn_blocking(move || a.live_pins())
            .await
            .map_err(|e| Status::internal(format!("affinity walk failed: {e}")))?;
        r.affinity_live_pins = live;
    }
    Ok(r)
}

fn info_from(
    (revision, published_revision, last_publish): Revisions,
    info: &ServerInfo,
) -> pb::GetInfoResponse {
    pb::GetInfoResponse {
        version: info.version.clone(),
        instance_id: info.instance_id.clone(),
        revision,
        published_revision,
        last_publish_micros: u64::try_from(last_publish.as_micros()).unwrap_or(u64::MAX),
        ports: info
            .ports
            .iter()
            .map(|port| {
                let st = port.status.get();
                pb::PortInfo {
                    id: port.id.into(),
                    name: port.name.clone(),
                    driver: port.driver.clone(),
                    mac: format_mac(port.mac),
                    link_up: st.up,
                    speed_mbps: st.speed_mbps,
                    rx_ipv4_checksum_offload: port.ipv4_checksum_offload.0,
                    tx_ipv4_checksum_offload: port.ipv4_checksum_offload.1,
                    vlan: port.vlan.map_or(0, u32::from),
                    mtu: port.mtu.into(),
                    addresses: port.addresses.clone(),
                }
            })
            .collect(),
        workers: info.workers,
        snat_addresses: info.snat_addresses.iter().map(ToString::to_string).collect(),
    }
}

fn stats_to_proto(s: PlaneStats) -> pb::GetStatsResponse {
    let flow = |f: crate::plane::FlowStats| pb::FlowStats {
        packets: f.packets,
        bytes: f.bytes,
        connections: f.connections,
    };
    let drops = |d: std::collections::BTreeMap<&'static str, u64>| {
        d.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    };
    pb::GetStatsResponse {
        frontends: s
            .frontends
            .into_iter()
            .map(|f| pb::FrontendStats {
                frontend: Some(convert::frontend_key_to_proto(&f.key)),
                service: f.service,
                stats: Some(flow(f.stats)),
            })
            .collect(),
        backends: s
            .backends
            .into_iter()
            .map(|b| pb::BackendStats {
                backend: Some(convert::backend_key_to_proto(&b.key)),
                stats: Some(flow(b.stats)),
            })
            .collect(),
        workers: s
            .workers
            .into_iter()
            .map(|w| pb::WorkerStats {
                worker: w.worker,
                rx_packets: w.rx_packets,
                tx_packets: w.tx_packets,
                local_replies: w.local_replies,
                handed_over: w.handed_over,
                new_connections: w.new_connections,
                stateless_forwards: w.stateless_forwards,
                conntrack_entries: w.conntrack_entries,
                conntrack_evictions: w.conntrack_evictions,
                conntrack_expirations: w.conntrack_expirations,
                drops: drops(w.drops),
                affinity_hits: w.affinity_hits,
                affinity_pins: w.affinity_pins,
                affinity_evictions: w.affinity_evictions,
                neighbor_updates: w.neighbor_updates,
                resets_sent: w.resets_sent,
                too_big_sent: w.too_big_sent,
                slot_overflow: w.slot_overflow,
            })
            .collect(),
        drops: drops(s.drops),
        conntrack_entries: s.conntrack_entries,
        revision: s.revision,
        // Filled by GetStats from what lbd reports.
        ports: Vec::new(),
        control: None,
        affinity_live_pins: 0,
        affinity_table_size: 0,
    }
}
