//! Backend churn through lbd's gRPC API: one backend of the measured
//! service alternates between maintenance and active `rate` times a second,
//! so every change rebuilds that service's Maglev ring and republishes the
//! snapshot while the workers forward. Established flows must keep their
//! backend (their conntrack entries hold it): the generator counts any
//! change as a violation.

use std::time::{Duration, Instant};

use lb_control::cli::{connect, ClientTls, ServerAddr};
use lb_proto::v1 as pb;

/// Runs the churn for `seconds`; returns how many changes lbd accepted.
pub fn run(server: &str, backend: &str, rate: f64, seconds: f64) -> anyhow::Result<u64> {
    let server: ServerAddr = server
        .parse()
        .map_err(|e| anyhow::anyhow!("--server {server:?}: {e}"))?;
    let (addr, port) = backend
        .rsplit_once(':')
        .ok_or_else(|| anyhow::anyhow!("--backend {backend:?}: expected ADDRESS:PORT"))?;
    let port: u32 = port
        .parse()
        .map_err(|_| anyhow::anyhow!("--backend {backend:?}: bad port"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut c = connect(&server, &ClientTls::default(), Duration::from_secs(30)).await?;
        let period = Duration::from_secs_f64(1.0 / rate.max(0.1));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let end = Instant::now() + Duration::from_secs_f64(seconds);
        let mut n = 0u64;
        while Instant::now() < end {
            tick.tick().await;
            let state = if n.is_multiple_of(2) {
                pb::BackendState::Maintenance
            } else {
                pb::BackendState::Active
            };
            let req = pb::SetBackendStateRequest {
                address: addr.to_string(),
                port,
                service: String::new(),
                state: state as i32,
            };
            c.set_backend_state(req).await?;
            n += 1;
        }
        // Leave it active.
        let req = pb::SetBackendStateRequest {
            address: addr.to_string(),
            port,
            service: String::new(),
            state: pb::BackendState::Active as i32,
        };
        c.set_backend_state(req).await?;
        Ok(n)
    })
}
