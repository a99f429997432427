//! A real lbd control server for tests: a `ControlPlane` with a state file
//! in a temporary directory, served on a unix socket there by a tokio
//! runtime on its own thread. Dropping the server stops it and joins the
//! thread; the directory goes with it.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use lb_control::grpc::{ControlCounters, PortInfo, ServerInfo, SharedPlane};
use lb_control::listen::{self, ListenAddr, ListenConfig, ListenError};
use lb_control::metrics::MetricsListener;
use lb_control::plane::{ControlPlane, InterfaceConfig, NodeConfig};
use lb_dataplane::affinity::AffinityTable;
use lb_dataplane::Tick;
use tempfile::TempDir;
use tokio::sync::oneshot;

/// Two ports (10.0.0.1/24 and 10.1.0.1/24) and one SNAT address.
pub fn node() -> NodeConfig {
    let iface = |port: u16, cidr: &str| InterfaceConfig {
        port,
        mac: [0x02, 0, 0, 0, 0, port as u8 + 1],
        cidr: cidr.parse().unwrap(),
        gateway: None,
        vlan: None,
        mtu: None,
    };
    NodeConfig {
        interfaces: vec![iface(0, "10.0.0.1/24"), iface(1, "10.1.0.1/24")],
        snat_addresses: vec!["10.1.0.100".parse::<IpAddr>().unwrap()],
        ..NodeConfig::default()
    }
}

pub fn ports() -> Vec<PortInfo> {
    (0..2)
        .map(|id| PortInfo {
            id,
            name: format!("net_null{id}"),
            driver: "net_null".into(),
            mac: [0x02, 0, 0, 0, 0, id as u8 + 1],
            ipv4_checksum_offload: (id == 1, false),
            vlan: (id == 1).then_some(20),
            mtu: 1500 + 7500 * id,
            addresses: vec![["10.0.0.1/24", "10.1.0.1/24"][usize::from(id)].to_string()],
            status: lb_control::grpc::PortStatus::new(true, 10_000),
        })
        .collect()
}

pub struct Server {
    pub dir: TempDir,
    /// The unix socket (or, for TCP, where one would be: it never exists).
    pub socket: PathBuf,
    /// Where it listens.
    pub addr: ListenAddr,
    /// Where its Prometheus endpoint listens (127.0.0.1, any port).
    pub metrics: std::net::SocketAddr,
    pub state_file: PathBuf,
    pub plane: SharedPlane,
    pub instance_id: String,
    /// The ports' link and counters, as lbd would update them.
    pub ports: Vec<Arc<lb_control::grpc::PortStatus>>,
    /// The control thread's counters, as lbd would update them.
    pub control: Arc<ControlCounters>,
    /// The affinity table, as the workers would fill it, and the pipeline
    /// clock its pins expire by (milliseconds).
    pub affinity: Arc<AffinityTable>,
    pub clock_ms: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), ListenError>>>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(|_| None)
    }

    /// Starts with the listener `config` returns for the temporary
    /// directory (`None`: the unix socket there).
    pub fn start_with(config: impl FnOnce(&std::path::Path) -> Option<ListenConfig>) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run/lbd.sock");
        let state_file = dir.path().join("state.json");
        let cfg = config(dir.path()).unwrap_or(ListenConfig {
            addr: ListenAddr::Unix(socket.clone()),
            tls: None,
        });
        let plane = ControlPlane::open(node(), Some(&state_file)).unwrap();
        let plane: SharedPlane = Arc::new(Mutex::new(plane));
        let ports = ports();
        let status = ports.iter().map(|p| Arc::clone(&p.status)).collect();
        let control = Arc::new(ControlCounters::default());
        let affinity = Arc::new(AffinityTable::new(1024, 7).unwrap());
        let clock_ms = Arc::new(AtomicU64::new(0));
        let clock = Arc::clone(&clock_ms);
        let info = ServerInfo::new(ports, 2)
            .with_snat_addresses(node().snat_addresses)
            .with_control(Arc::clone(&control))
            .with_affinity(Arc::clone(&affinity), move || Tick(clock.load(Ordering::Relaxed)));
        let instance_id = info.instance_id.clone();
        let metrics = MetricsListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let metrics_addr = metrics.addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let p = Arc::clone(&plane);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = match listen::bind(&cfg).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return Err(e);
                    }
                };
                let _ = ready_tx.send(Ok(listener.addr().clone()));
                // One stop for both servers.
                let (done_tx, done) = tokio::sync::watch::channel(false);
                let stopping = async move {
                    let _ = stopped.await;
                    done_tx.send_replace(true);
                };
                let mut done2 = done.clone();
                let grpc = listener.serve(Arc::clone(&p), info.clone(), async move {
                    let mut done = done;
                    let _ = done.wait_for(|&d| d).await;
                });
                let metrics = metrics.serve(p, info, async move {
                    let _ = done2.wait_for(|&d| d).await;
                });
                let (r, m, ()) = tokio::join!(grpc, metrics, stopping);
                m.unwrap();
                r
            })
        });
        let addr = ready_rx.recv().unwrap().unwrap();
        Server {
            dir,
            socket,
            addr,
            metrics: metrics_addr,
            state_file,
            plane,
            instance_id,
            ports: status,
            control,
            affinity,
            clock_ms,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Stops the server and returns how `serve` ended.
    pub fn stop(&mut self) -> Result<(), ListenError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take() {
            Some(t) => t.join().unwrap(),
            None => Ok(()),
        }
    }

    pub fn revision(&self) -> u64 {
        self.plane.lock().unwrap().revision()
    }

    pub fn state(&self) -> lb_control::model::DesiredState {
        self.plane.lock().unwrap().state().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
