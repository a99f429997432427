//! lbd: a userspace DPDK L4 load balancer.
//!
//! Start-up order: parse and check flags (errors are one line and exit 2),
//! load the config, check the gRPC listener's files and socket, PCI
//! devices, hugepages and the conntrack tables' memory (errors are one
//! line and exit 1), initialise EAL, check that every
//! `--pci`/`--vdev` became a port, configure each port with one rx and one
//! tx queue per worker, open the control plane (restoring `--state-file`,
//! with the config file's services resynced into it before the first
//! compile), bind the gRPC listener (and `--metrics`'s, before EAL), and only
//! then start the ports, the control thread and the workers. The
//! main thread forwards too when it is the only lcore; otherwise it waits
//! for SIGINT/SIGTERM. Shutdown reverses it: workers stop and are joined,
//! the control thread ends the gRPC server, ports stop, final counters are
//! printed, ports close, EAL is cleaned up, exit 0.

/// `println!` that ignores a closed stdout: the summary at exit must not
/// turn into a panic (exit 101) when whoever read lbd's output went away.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// `eprintln!` that ignores a closed stderr, for the same reason.
macro_rules! err_out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

mod announce;
mod cli;
mod config;
mod control;
mod neighbor;
mod ports;
mod preflight;
mod worker;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use dpdk::flow::{FlowRule, L4};
use dpdk::ring::Consumer;
use dpdk::{Eal, Mempool, Port};
use lb_control::grpc::{ControlCounters, PortInfo, PortStatus, ServerInfo, SharedPlane};
use lb_control::listen::{ListenConfig, ListenError, TlsPaths};
use lb_control::metrics::MetricsListener;
use lb_control::model::Source;
use lb_control::plane::{ControlPlane, InitialResync, NodeConfig, PlaneError};
use lb_dataplane::affinity::AffinityTable;
use lb_dataplane::conntrack;
use lb_dataplane::flow::WorkerId;
use lb_dataplane::worker::{Worker, WorkerConfig};

use crate::cli::{vdev_name, Cli, Lcores};
use crate::config::Config;
use crate::control::Control;
use crate::worker::{Clock, Links, Offloads, Shared, Wiring, WorkerIo};

/// The system allocator, with transparent huge pages asked for under the
/// large blocks: the conntrack tables (see `dpdk::HugePageAdvice`).
#[global_allocator]
static ALLOC: dpdk::HugePageAdvice = dpdk::HugePageAdvice;

/// Capacity of each hand-over ring (per sender, owner pair).
const HANDOVER_RING: u32 = 1024;
/// Capacity of the control thread's ring to worker 0.
const CONTROL_RING: u32 = 1024;

/// `s` with control characters escaped (`\n`, `\u{1b}`): an error quotes
/// what it found in a file (a TOML key, a value), and must stay one line
/// that cannot drive the terminal.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        // One line: clap's first paragraph, without its usage block.
        Err(e) => match lb_control::cli::clap_error_line(&e) {
            None => e.exit(),
            Some(line) => {
                err_out!("lbd: {line} (see lbd --help)");
                return ExitCode::from(2);
            }
        },
    };
    // Between flags: a usage error like clap's, before anything starts.
    if let Err(e) = cli.check() {
        err_out!("lbd: {e} (see lbd --help)");
        return ExitCode::from(2);
    }
    init_logging();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            err_out!("lbd: {}", printable(&lb_control::cli::error_line(&*e)));
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("LBD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false)
        .compact()
        .init();
}

/// Starts lbd, runs it until SIGINT/SIGTERM (or a thread's failure), and
/// shuts it down, one phase after the other (see the module doc). Returns
/// the first error of start-up, or after the summary what ended abnormally.
fn run(cli: Cli) -> anyhow::Result<()> {
    let (checked, metrics) = check_before_eal(&cli)?;
    let stop = stop_on_signals()?;
    let (eal, nports) = init_eal(&cli, &checked.config, &checked.pci)?;
    let (dpdk, node) = configure_ports(eal, nports, &cli, &checked.config)?;
    let plane = open_plane(&cli, &checked.config, node)?;
    let built = build(&cli, &checked, metrics, &dpdk, plane, &stop)?;
    let (running, ios) = start(&dpdk, &checked.config, built.rt, built.control, &stop)?;
    let lanes = Lanes {
        ios,
        pipeline: built.pipeline,
        links: built.links,
    };
    let ended = run_workers(&dpdk.eal, &cli.lcores, &stop, lanes, built.shared);
    shutdown(running, ended, &built.ctl_stats, built.plane, dpdk)
}

/// What the checks before EAL load.
struct Checked {
    /// The config file (the defaults without `--config`).
    config: Config,
    /// The gRPC listener's address and TLS files, checked, not bound yet.
    listen: ListenConfig,
    /// The `--pci` devices, in canonical form.
    pci: Vec<String>,
}

/// Phase 1, before EAL: warns of lcores that share a CPU, loads the
/// config, checks what the gRPC listener would refuse, binds `--metrics`,
/// and checks the PCI devices, hugepages and the conntrack tables' memory.
/// Returns what was loaded, and `--metrics`'s listener, bound; an error is
/// one line (exit 1).
fn check_before_eal(cli: &Cli) -> anyhow::Result<(Checked, Option<MetricsListener>)> {
    let lcores = &cli.lcores;
    for (cpu, on_it) in lcores.crowded_cpus() {
        tracing::warn!(
            cpu,
            lcores = ?on_it,
            "lcores share a CPU with a polling worker: each gets a share of it, and a control thread there answers ARP and the API late (fine for tests and benchmarks on few cores; give each lcore its own CPU on a gateway node)"
        );
    }
    let config = match &cli.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let listen = listen_config(cli);
    // What the listener would refuse (files, the socket), found before
    // EAL, the ports or the state file are touched; bound for real later.
    lb_control::listen::check(&listen).map_err(|e| anyhow::anyhow!("{}: {e}", listen_flag(cli, &e)))?;
    // Bound now, so an address in use is found before EAL; served by the
    // control thread.
    let metrics = cli
        .metrics
        .map(MetricsListener::bind)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--metrics: {e}"))?;
    let pci = preflight::check_pci(&cli.pci)?;
    if !cli.no_huge {
        preflight::check_hugepages()?;
    }
    // With --no-huge, DPDK's memory comes from the same ordinary memory.
    let dpdk_mib = cli.ordinary_dpdk_mem().map_or(0, u64::from);
    // The affinity table comes from the same memory as the connection tables.
    let affinity_mib = preflight::affinity_bytes(cli.affinity_size).div_ceil(1 << 20);
    preflight::check_conntrack_memory(cli.conntrack_size, lcores.workers(), dpdk_mib + affinity_mib)?;
    Ok((Checked { config, listen, pci }, metrics))
}

/// Installs the SIGINT/SIGTERM handlers. Returns `stop`, the flag they set.
fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    // Signals first: a SIGTERM during start-up must still stop us cleanly.
    // A second SIGINT/SIGTERM while stopping exits at once with status 1.
    // "Second" counts signals only (`signalled`), not a stop that a failed
    // thread set (`StopOnExit`): after such a failure, one Ctrl-C during
    // the shutdown must not skip the summary and the ports' cleanup.
    let stop = Arc::new(AtomicBool::new(false));
    let signalled = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, signalled.clone())
            .context("installing signal handler")?;
        signal_hook::flag::register(sig, signalled.clone()).context("installing signal handler")?;
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handler")?;
    }
    Ok(stop)
}

/// Phase 2: initialises EAL with `pci`'s devices, then checks that it
/// runs workers on the lcores of `--lcores`, that every `--pci`/`--vdev`
/// became a port, that the ports are numbered from 0 without gaps, and
/// that the config has one `[[interface]]` per port (or none). Returns EAL
/// and its number of ports.
fn init_eal(cli: &Cli, config: &Config, pci: &[String]) -> anyhow::Result<(Eal, u16)> {
    let lcores = &cli.lcores;
    let eal_args = cli.eal_args(lcores, pci);
    tracing::debug!(?eal_args, "initialising EAL");
    let eal = Eal::init(&eal_args)?;
    // Queues, workers and rings are sized for `--lcores`. EAL arguments
    // after `--` can take lcores from the workers (service cores, `-s` or
    // `-S`): their rx queues would go unpolled, or with none left the main
    // lcore would forward with no control frames drained.
    let mut eal_workers: Vec<u32> = eal.worker_lcores().iter().map(|l| l.0).collect();
    let mut want = lcores.ids[1..].to_vec();
    eal_workers.sort_unstable();
    want.sort_unstable();
    if eal_workers != want {
        bail!(
            "EAL runs workers on lcores {eal_workers:?}, not the {want:?} of --lcores {}: leave out the EAL arguments after `--` that take lcores (service cores, -s/-S)",
            lcores.spec
        );
    }

    // Every requested device must have become a port.
    for bdf in pci {
        if eal.port_by_name(bdf).is_none() {
            let now = preflight::pci_driver(bdf)
                .map(|d| format!(" (it is bound to {d})"))
                .unwrap_or_default();
            bail!(
                "PCI device {bdf} is not bound to a DPDK driver{now}: bind it with `dpdk-devbind.py --bind=vfio-pci {bdf}`"
            );
        }
    }
    for v in &cli.vdev {
        if eal.port_by_name(vdev_name(v)).is_none() {
            bail!("vdev {v:?} failed to probe (see DPDK's message above): check the device name and its arguments");
        }
    }
    let nports = eal.port_count();
    // Ports are indexed by id (interfaces in port order, tx queues, the
    // snapshot's ports): ids with holes (a bonded or failsafe device's
    // sub-ports, which it owns) would put the config on the wrong device.
    let ids = eal.port_ids();
    if ids.iter().copied().ne(0..nports) {
        bail!(
            "DPDK's ports have ids {ids:?}, not 0 to {}: lbd drives ports numbered from 0 without gaps (bonded or failsafe devices are not supported)",
            nports.saturating_sub(1)
        );
    }
    if !config.interfaces.is_empty() && config.interfaces.len() != nports as usize {
        bail!(
            "the config has {} [[interface]] tables but DPDK has {nports} ports: give one per port, in port order",
            config.interfaces.len()
        );
    }
    Ok((eal, nports))
}

/// EAL, the mbuf pool and the ports, configured with one queue pair per
/// worker. The fields are declared in the order they must be released
/// (on an early error they drop in that order; at exit, [`shutdown`] drops
/// them one by one): the ports, then the pool, and EAL, which must outlive
/// everything DPDK, last.
struct Dpdk {
    /// Configured; started by [`start`].
    ports: Vec<Port>,
    /// The one mbuf pool of the ports, the rings and the control thread.
    pool: Arc<Mempool>,
    /// The initialised EAL.
    eal: Eal,
    /// Queues per port: one per worker.
    queues: u16,
    /// The IPv4 header checksum offloads the workers use.
    offloads: Offloads,
}

/// Phase 2, continued: makes the mbuf pool and configures `nports` ports
/// with one rx and one tx queue per worker, adding their prefixes to the
/// node configuration; logs when tx checksum offload is left unused.
/// Returns EAL, the pool and the ports, and the node configuration.
fn configure_ports(eal: Eal, nports: u16, cli: &Cli, config: &Config) -> anyhow::Result<(Dpdk, NodeConfig)> {
    let workers = cli.lcores.workers();
    let queues = u16::try_from(workers).context("too many workers")?;
    let pool = ports::mbuf_pool(&eal, cli, config, nports, workers)?;

    let mut node = NodeConfig {
        node_name: cli.node_name.clone().or_else(|| config.node.clone()),
        snat_addresses: config.services.snat.clone(),
        ..NodeConfig::default()
    };
    let ports = ports::configure(&eal, cli, config, &pool, nports, queues, &mut node)?;

    let per_port: Vec<_> = ports.iter().map(Port::checksum_offload).collect();
    let offloads = Offloads::of_ports(&per_port);
    if !offloads.tx_ipv4 && per_port.iter().any(|c| c.tx_ipv4) {
        tracing::info!(
            "tx IPv4 checksum offload not used: not every port has it (lbd sums headers in software)"
        );
    }
    let dpdk = Dpdk {
        ports,
        pool,
        eal,
        queues,
        offloads,
    };
    Ok((dpdk, node))
}

/// Phase 3: opens the control plane for `node`: restores `--state-file`
/// with the config file's services resynced into it before the first
/// compile, and logs the node name and what the resync changed. Returns
/// the plane.
fn open_plane(cli: &Cli, config: &Config, node: NodeConfig) -> anyhow::Result<ControlPlane> {
    // The desired state before anything forwards: the state file, then the
    // config file's services (the `config` source).
    match &node.node_name {
        Some(n) => tracing::info!(node = %n, "node name (for traffic_policy = \"local\")"),
        None => tracing::info!(
            "no node name (--node-name or node in the config): services with traffic_policy = \"local\" take no new connections"
        ),
    }
    let config_name = cli
        .config
        .as_ref()
        .map_or_else(|| "(none)".to_string(), |p| p.display().to_string());
    // One step: the state file's objects of the config source were
    // compiled for the last run's node configuration, so the config file's
    // (which changed with it) replace them before anything is compiled.
    let sf = &config.services;
    let initial = InitialResync {
        source: Source::Config,
        services: sf.services.clone(),
        frontends: sf.frontends.clone(),
        backends: sf.backends.clone(),
    };
    let (plane, out) =
        ControlPlane::open_with(node, cli.state_file.as_deref(), Some(initial)).map_err(|e| match e {
            // A state file that cannot be loaded, or does not compile even
            // with the config's objects replaced, is the file's fault.
            e @ PlaneError::StateFile { .. } => e.into(),
            // The interfaces and SNAT addresses come from the config file
            // (on the ports lbd found), and so do the resynced objects.
            e => anyhow::anyhow!("config {config_name}: {e}"),
        })?;
    let out = out.unwrap_or_default();
    tracing::info!(
        revision = out.revision,
        added = out.added,
        updated = out.updated,
        removed = out.removed,
        "config services applied"
    );
    if cli.config.is_none() && out.removed > 0 {
        // Most likely a restart that forgot --config: say what it cost.
        tracing::warn!(
            removed = out.removed,
            "no --config: the state file's config-source services, frontends and backends were removed (restart with --config to restore them)"
        );
    }
    Ok(plane)
}

/// The workers' pipelines and the control thread, built and wired to each
/// other; nothing runs yet.
struct Built {
    /// Worker `i`'s pipeline, at `i`.
    pipeline: Vec<Worker>,
    /// Worker `i`'s rings, at `i`.
    links: Vec<Links>,
    /// What every worker shares.
    shared: Shared,
    /// The control thread's runtime, with the gRPC listener bound on it.
    rt: tokio::runtime::Runtime,
    /// What the control thread owns.
    control: Control,
    /// The control thread's counters: it updates them, GetStats and the
    /// exit summary read them.
    ctl_stats: Arc<ControlCounters>,
    /// The control plane, shared with the control thread.
    plane: SharedPlane,
    /// The client-IP affinity table the pipelines and GetStats share, held
    /// until `run` returns.
    _affinity: Arc<AffinityTable>,
}

/// Phase 4: builds the pipelines ([`build_pipelines`]) and registers their
/// counters with `plane`; builds GetInfo's answer ([`server_info`]), the
/// control thread's runtime with the gRPC listener bound on it, and the
/// rings between the lcores ([`worker::wire`]). Returns them, with the
/// plane now shared.
fn build(
    cli: &Cli,
    checked: &Checked,
    metrics: Option<MetricsListener>,
    dpdk: &Dpdk,
    mut plane: ControlPlane,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Built> {
    let config = &checked.config;
    let (affinity, pipeline) = build_pipelines(cli, config, dpdk.queues)?;
    plane.register_workers(pipeline.iter().map(|w| Arc::clone(w.counters())).collect());
    let snapshot = plane.snapshot_handle();
    let plane = Arc::new(Mutex::new(plane));

    let Served {
        info,
        ports: port_status,
        ctl_stats,
        clock,
    } = server_info(dpdk, config, &affinity);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the control thread's runtime")?;
    let listener = rt.block_on(lb_control::listen::bind(&checked.listen))?;

    let Wiring {
        links,
        held_in,
        to_worker: ctl_p,
        news: news_rx,
    } = worker::wire(&dpdk.eal, cli.lcores.workers())?;

    let control = Control {
        plane: Arc::clone(&plane),
        info,
        listener,
        metrics,
        stop: stop.clone(),
        pool: dpdk.pool.clone(),
        to_worker: ctl_p,
        held_in,
        news: news_rx,
        ports: port_status,
    };
    let shared = Shared {
        snapshot,
        stop: stop.clone(),
        clock,
    };
    Ok(Built {
        pipeline,
        links,
        shared,
        rt,
        control,
        ctl_stats,
        plane,
        _affinity: affinity,
    })
}

/// Logs THP's mode and the conntrack timeouts, makes the client-IP
/// affinity table (logging its size) and one pipeline per queue. Returns
/// the table and the pipelines, in worker order.
fn build_pipelines(
    cli: &Cli,
    config: &Config,
    queues: u16,
) -> anyhow::Result<(Arc<AffinityTable>, Vec<Worker>)> {
    preflight::report_thp();
    match config::timeouts::non_default(&config.conntrack_timeouts) {
        Some(changed) => tracing::info!("conntrack timeouts: {changed}, the others default"),
        None => tracing::info!("conntrack timeouts: the defaults"),
    }
    let affinity =
        Arc::new(AffinityTable::new(cli.affinity_size as usize, random_seed()).context("--affinity-size")?);
    tracing::info!(
        pins = affinity.capacity(),
        mib = preflight::affinity_bytes(cli.affinity_size) >> 20,
        "client-IP affinity table"
    );
    let mut pipeline = Vec::new();
    for w in 0..queues {
        let mut wc = WorkerConfig::new(WorkerId(w), queues);
        wc.conntrack =
            conntrack::Config::new(cli.conntrack_size, preflight::conntrack_v6(cli.conntrack_size));
        wc.conntrack.timeouts = config.conntrack_timeouts;
        // A per-process secret: clients cannot aim for long probe runs.
        wc.conntrack.hash_seed = random_seed();
        wc.affinity = Some(Arc::clone(&affinity));
        wc.snat_addresses = config.services.snat.clone();
        pipeline.push(Worker::new(wc).with_context(|| format!("worker {w}"))?);
    }
    Ok((affinity, pipeline))
}

/// What GetInfo and GetStats report, made before the ports start.
struct Served {
    /// GetInfo's answer, with the control counters and the affinity table.
    info: ServerInfo,
    /// Each port with its link status as GetInfo and GetStats report it.
    ports: Vec<(Port, Arc<PortStatus>)>,
    /// The control thread's counters.
    ctl_stats: Arc<ControlCounters>,
    /// The workers' clock.
    clock: Clock,
}

/// Reads each port's link and describes the ports for GetInfo; makes the
/// control thread's counters and the workers' clock. Returns them with
/// GetInfo's answer.
fn server_info(dpdk: &Dpdk, config: &Config, affinity: &Arc<AffinityTable>) -> Served {
    let port_status: Vec<(Port, Arc<PortStatus>)> = dpdk
        .ports
        .iter()
        .map(|p| {
            let l = p.link();
            (p.clone(), PortStatus::new(l.up, l.speed_mbps))
        })
        .collect();
    let port_infos = port_status
        .iter()
        .map(|(p, status)| PortInfo {
            id: p.id(),
            name: p.info().name.clone(),
            driver: p.info().driver.clone(),
            mac: p.mac().0,
            ipv4_checksum_offload: (p.checksum_offload().rx_ipv4, dpdk.offloads.tx_ipv4),
            vlan: config.interfaces.get(usize::from(p.id())).and_then(|i| i.vlan),
            mtu: p.mtu().unwrap_or(0),
            addresses: config
                .interfaces
                .get(usize::from(p.id()))
                .map(|i| i.addresses.iter().map(ToString::to_string).collect())
                .unwrap_or_default(),
            status: Arc::clone(status),
        })
        .collect();
    // The control thread's counters: it updates them, GetStats and the
    // exit summary read them.
    let ctl_stats = Arc::new(ControlCounters::default());
    // The workers' clock: pins expire by it, and GetStats counts live ones.
    let clock = Clock::new(dpdk.eal.tsc_hz());
    let info = ServerInfo::new(port_infos, u32::from(dpdk.queues))
        .with_snat_addresses(config.services.snat.clone())
        .with_control(Arc::clone(&ctl_stats))
        .with_affinity(Arc::clone(affinity), move || clock.now());
    Served {
        info,
        ports: port_status,
        ctl_stats,
        clock,
    }
}

/// What [`start`] started, for [`shutdown`] to end.
struct Running {
    /// The control thread; returns the held-frame rings and its outcome.
    control_thread: std::thread::JoinHandle<(Vec<Consumer>, anyhow::Result<()>)>,
    /// The rte_flow rules steering full-NAT replies (none: software rings).
    steering: Vec<FlowRule>,
}

/// Phase 5: starts the ports (logging each link), steers full-NAT replies
/// to their owner's queue where the ports allow it ([`steer_replies`]),
/// claims each worker's queues, and spawns the control thread with
/// `control` on `rt`. Returns the thread and the steering rules, and
/// worker `i`'s queues at `i`.
fn start(
    dpdk: &Dpdk,
    config: &Config,
    rt: tokio::runtime::Runtime,
    control: Control,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<(Running, Vec<WorkerIo>)> {
    for p in &dpdk.ports {
        p.start()?;
        let l = p.link();
        tracing::info!(
            port = p.id(),
            up = l.up,
            speed_mbps = l.speed_mbps,
            "port started"
        );
    }

    let steering = steer_replies(&dpdk.ports, &config.services.snat, dpdk.queues);

    let mut ios = Vec::new();
    for q in 0..dpdk.queues {
        let rx = dpdk
            .ports
            .iter()
            .map(|p| p.rx_queue(q))
            .collect::<Result<Vec<_>, _>>()?;
        let tx = dpdk
            .ports
            .iter()
            .map(|p| p.tx_queue(q))
            .collect::<Result<Vec<_>, _>>()?;
        ios.push(WorkerIo {
            index: q as usize,
            rx,
            tx,
            offloads: dpdk.offloads,
        });
    }

    // Spawned from the main thread, it inherits the main lcore's CPU. If
    // it ends before `stop` (an error, a panic), lbd stops: without it
    // nothing answers the API or resolves next hops.
    let control_stop = stop.clone();
    let control_thread = std::thread::Builder::new()
        .name("lbd-control".into())
        .spawn(move || {
            let _stop = StopOnExit::new(control_stop, "the control thread");
            control::run(rt, control)
        })
        .context("starting the control thread")?;
    Ok((
        Running {
            control_thread,
            steering,
        },
        ios,
    ))
}

/// What each worker is handed, by worker index.
struct Lanes {
    /// Its queue on every port.
    ios: Vec<WorkerIo>,
    /// Its pipeline.
    pipeline: Vec<Worker>,
    /// Its rings to and from the other lcores.
    links: Vec<Links>,
}

/// How the workers ended.
struct Ended {
    /// The pipeline and rings of each worker that stopped normally.
    finals: Vec<(Worker, Links)>,
    /// Workers started: fewer than `workers` when one could not be launched.
    started: usize,
    /// What ended abnormally: lbd exits non-zero after its summary.
    failures: Vec<String>,
}

/// Phase 5, continued: runs the workers until `stop`, on the main lcore
/// when it is the only one ([`forward_on_main_lcore`]), otherwise one per
/// worker lcore while the main thread waits ([`launch_workers`]). Returns
/// how they ended.
fn run_workers(eal: &Eal, lcores: &Lcores, stop: &Arc<AtomicBool>, lanes: Lanes, shared: Shared) -> Ended {
    if eal.worker_lcores().is_empty() {
        forward_on_main_lcore(lcores, stop, lanes, shared)
    } else {
        launch_workers(eal, lcores.workers(), stop, lanes, shared)
    }
}

/// Forwards on the main lcore (the single lcore, the single worker) until
/// `stop`. Returns its pipeline and rings, or, when it panicked, none and
/// the failure.
fn forward_on_main_lcore(lcores: &Lcores, stop: &Arc<AtomicBool>, mut lanes: Lanes, shared: Shared) -> Ended {
    let mut failures: Vec<String> = Vec::new();
    tracing::info!(
        lcore = lcores.main(),
        "forwarding on the main lcore (single lcore)"
    );
    tracing::info!("lbd running; SIGINT or SIGTERM stops it");
    let io = lanes.ios.pop().expect("one worker");
    let w = lanes.pipeline.pop().expect("one worker");
    let l = lanes.links.pop().expect("one worker");
    // As a worker lcore's panic is (EAL's trampoline, `StopOnExit`): a
    // panic here must not unwind out of main, past the control
    // thread's stop, the ports' stop and the summary.
    let run = std::panic::AssertUnwindSafe(|| worker::run(w, io, l, shared));
    let finals = match std::panic::catch_unwind(run) {
        Ok(w) => vec![w],
        Err(_) => {
            stop.store(true, Ordering::Relaxed);
            tracing::error!("the worker on the main lcore ended abnormally");
            failures.push("a worker panicked".to_string());
            Vec::new()
        }
    };
    Ended {
        finals,
        started: lcores.workers(),
        failures,
    }
}

/// Launches `workers` workers, one per EAL worker lcore, waits for `stop`
/// and joins them. A worker that cannot be launched sets `stop` and is
/// a failure, as is one that panicked. Returns the pipelines and rings of
/// those that stopped normally.
fn launch_workers(eal: &Eal, workers: usize, stop: &Arc<AtomicBool>, lanes: Lanes, shared: Shared) -> Ended {
    let mut failures: Vec<String> = Vec::new();
    // Workers started: fewer than `workers` when one could not be launched.
    let mut started = workers;
    let mut handles = Vec::new();
    let results: Vec<WorkerSlot> = (0..workers).map(|_| Arc::new(Mutex::new(None))).collect();
    let lcores_w = eal.worker_lcores().to_vec();
    let each = lanes
        .ios
        .into_iter()
        .zip(lanes.pipeline)
        .zip(lanes.links)
        .zip(&results)
        .zip(&lcores_w);
    for ((((io, w), l), slot), lcore) in each {
        let shared = shared.clone();
        let slot = Arc::clone(slot);
        let index = io.index;
        let worker_stop = stop.clone();
        let launched = eal.launch(*lcore, move || {
            // A worker that panics stops lbd: its queues would
            // otherwise go unpolled while the others run on.
            let _stop = StopOnExit::new(worker_stop, "a worker");
            let w = worker::run(w, io, l, shared);
            if let Ok(mut s) = slot.lock() {
                *s = Some(w);
            }
            0
        });
        match launched {
            Ok(h) => handles.push(h),
            Err(e) => {
                // The workers already running loop until `stop`: stop
                // them, then shut down as on any stop (workers and the
                // control thread joined, ports stopped, the summary
                // printed), and fail.
                tracing::error!(worker = index, lcore = lcore.0, "cannot start the worker: {e}");
                failures.push(format!("starting worker {index} on lcore {}: {e}", lcore.0));
                stop.store(true, Ordering::Relaxed);
                started = handles.len();
                break;
            }
        }
        tracing::info!(worker = index, lcore = lcore.0, "worker started");
    }
    if !stop.load(Ordering::Relaxed) {
        tracing::info!("lbd running; SIGINT or SIGTERM stops it");
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for h in handles {
        let rc = h.join();
        if rc != 0 {
            tracing::error!(rc, "a worker ended abnormally");
            failures.push("a worker panicked".to_string());
        }
    }
    let finals = results.iter().filter_map(|r| r.lock().ok()?.take()).collect();
    Ended {
        finals,
        started,
        failures,
    }
}

/// Phase 6: joins the control thread, counts and frees what is left in
/// the rings, removes the steering rules, stops the ports, prints the
/// summary, and releases the workers, the plane, the ports, the pool and
/// EAL, in that order. Returns the failures of the run, joined, as the
/// error.
fn shutdown(
    running: Running,
    ended: Ended,
    ctl_stats: &ControlCounters,
    plane: SharedPlane,
    dpdk: Dpdk,
) -> anyhow::Result<()> {
    let Running {
        control_thread,
        steering,
    } = running;
    let Ended {
        finals,
        started,
        mut failures,
    } = ended;
    let Dpdk {
        ports,
        pool,
        eal,
        queues,
        ..
    } = dpdk;
    let workers = usize::from(queues);
    tracing::info!("stopping");
    let mut rings_in: Vec<Consumer> = Vec::new();
    let mut control_panicked = false;
    match control_thread.join() {
        Ok((held_in, r)) => {
            rings_in.extend(held_in);
            if let Err(e) = r {
                let e = lb_control::cli::error_line(&*e);
                tracing::error!("control thread: {e}");
                failures.push(format!("control thread: {e}"));
            }
        }
        Err(_) => {
            tracing::error!("the control thread panicked");
            failures.push("the control thread panicked".to_string());
            control_panicked = true;
        }
    }
    // Every lcore has stopped: what is left in the rings between them
    // (hand-overs, frames for the control thread or from it) was received
    // and never sent. Count it before the rings free it.
    let (finals, links_back): (Vec<Worker>, Vec<Links>) = finals.into_iter().unzip();
    for l in links_back {
        rings_in.extend(l.handover_in);
        rings_in.extend(l.control_in);
    }
    let left_in_rings = drain_count(&mut rings_in);
    drop(steering);
    // A port that fails to stop is a failure like any other: the summary
    // is still printed and the other ports still stopped.
    for p in &ports {
        if let Err(e) = p.stop() {
            tracing::error!("stopping port {}: {e}", p.id());
            failures.push(format!("stopping port {}: {e}", p.id()));
        }
    }
    print_summary(&ports, &finals, ctl_stats, left_in_rings);
    if finals.len() < started {
        // Its hand-over rings went with it: their frames were freed, not
        // counted in `left_at_exit`.
        out!(
            "  workers: {} of {workers} ended abnormally, their counters and rings are not above",
            started - finals.len()
        );
    }
    if started < workers {
        out!("  workers: {} of {workers} never started", workers - started);
    }
    if control_panicked {
        // Its neighbor table and the rings of frames waiting for a next
        // hop went with it, uncounted.
        out!("  control: ended abnormally, the frames it held are not above");
    }
    drop(finals);
    drop(plane);
    drop(ports);
    drop(pool);
    // The emptied rings hold the last handles on EAL besides `eal` (each
    // DPDK object holds one): EAL is cleaned up when `eal` goes, next.
    drop(rings_in);
    drop(eal);
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

/// Sets `stop` when dropped by a thread that did not set it first: one
/// that returned early (an error) or is unwinding from a panic, so that
/// lbd stops instead of running on without it.
struct StopOnExit {
    stop: Arc<AtomicBool>,
    what: &'static str,
}

impl StopOnExit {
    fn new(stop: Arc<AtomicBool>, what: &'static str) -> StopOnExit {
        StopOnExit { stop, what }
    }

    /// Sets `stop`; true (and an error logged) when it was not set yet,
    /// that is when this thread's end is what stops lbd.
    fn stop_lbd(&self) -> bool {
        if self.stop.swap(true, Ordering::Relaxed) {
            return false;
        }
        let how = if std::thread::panicking() {
            "panicked"
        } else {
            "ended"
        };
        tracing::error!("{} {how} while lbd was running; stopping lbd", self.what);
        true
    }
}

impl Drop for StopOnExit {
    fn drop(&mut self) {
        self.stop_lbd();
    }
}

/// With several workers, installs rte_flow rules that steer full-NAT
/// replies (destination = an IPv4 SNAT address, destination port & mask =
/// worker) to the owner's queue, per port; a port whose PMD refuses any of
/// them keeps none and relies on software hand-over. Logs which is in use.
fn steer_replies(ports: &[Port], snat: &[std::net::IpAddr], workers: u16) -> Vec<FlowRule> {
    let mut all = Vec::new();
    if workers < 2 {
        return all;
    }
    let mask = lb_dataplane::flow::snat_port_mask(workers);
    let snat_v4: Vec<std::net::Ipv4Addr> = snat
        .iter()
        .filter_map(|a| match a {
            std::net::IpAddr::V4(a) => Some(*a),
            std::net::IpAddr::V6(_) => None,
        })
        .collect();
    for p in ports {
        let mut rules = Vec::new();
        let mut refused = None;
        'rules: for &addr in &snat_v4 {
            for l4 in [L4::Tcp, L4::Udp] {
                for w in 0..workers {
                    match FlowRule::steer_v4_dst_port(p, addr, l4, w, mask, w) {
                        Ok(r) => rules.push(r),
                        Err(e) => {
                            refused = Some(e);
                            break 'rules;
                        }
                    }
                }
            }
        }
        match refused {
            Some(e) => {
                drop(rules);
                tracing::info!(
                    port = p.id(),
                    "flow hand-over between workers: software rings (rte_flow refused: {})",
                    e.message
                );
            }
            None if snat_v4.is_empty() => tracing::info!(
                port = p.id(),
                "flow hand-over between workers: software rings (no IPv4 SNAT address to steer)"
            ),
            None => {
                tracing::info!(
                    port = p.id(),
                    rules = rules.len(),
                    "flow hand-over between workers: rte_flow steers full-NAT replies to their owner's queue; software rings for the rest"
                );
                all.extend(rules);
            }
        }
    }
    all
}

/// `--grpc` and the TLS flags.
fn listen_config(cli: &Cli) -> ListenConfig {
    let addr = cli.grpc.clone();
    let tls = match (&cli.grpc_tls_cert, &cli.grpc_tls_key) {
        (Some(cert), Some(key)) => Some(TlsPaths {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: cli.grpc_client_ca.clone(),
        }),
        _ => None,
    };
    ListenConfig { addr, tls }
}

/// The flag a listener error is about: the TLS file's own flag when a file
/// could not be read, the TLS flags when their contents were refused,
/// `--grpc` otherwise.
fn listen_flag(cli: &Cli, e: &ListenError) -> &'static str {
    match e {
        ListenError::ReadTls { path, .. } => {
            if cli.grpc_tls_cert.as_ref() == Some(path) {
                "--grpc-tls-cert"
            } else if cli.grpc_tls_key.as_ref() == Some(path) {
                "--grpc-tls-key"
            } else {
                "--grpc-client-ca"
            }
        }
        ListenError::Tls(_) => "--grpc-tls-cert/--grpc-tls-key/--grpc-client-ca",
        _ => "--grpc",
    }
}

/// Where a worker lcore leaves its pipeline and rings when it stops.
type WorkerSlot = Arc<Mutex<Option<(Worker, Links)>>>;

/// Empties `rings`, freeing what they hold; returns how many frames that was.
fn drain_count(rings: &mut [Consumer]) -> u64 {
    let mut burst = dpdk::Burst::new();
    let mut n = 0;
    for r in rings {
        loop {
            let got = r.dequeue_burst(&mut burst);
            if got == 0 {
                break;
            }
            n += got as u64;
            burst.clear();
        }
    }
    n
}

fn print_summary(ports: &[Port], workers: &[Worker], ctl: &ControlCounters, left_in_rings: u64) {
    out!("final counters:");
    for p in ports {
        match p.stats() {
            Ok(s) => out!(
                "  port {} ({}): rx {} pkts {} bytes, tx {} pkts {} bytes, imissed {}, ierrors {}, oerrors {}, rx_nombuf {}",
                p.id(),
                p.info().name,
                s.ipackets,
                s.ibytes,
                s.opackets,
                s.obytes,
                s.imissed,
                s.ierrors,
                s.oerrors,
                s.rx_nombuf
            ),
            Err(e) => out!("  port {}: {e}", p.id()),
        }
    }
    for w in workers {
        let c = w.counters();
        let drops: Vec<String> = c
            .nonzero_drops()
            .map(|(r, n)| format!("{}={n}", r.name()))
            .collect();
        // Only where a service has client-IP affinity.
        let pins = [&c.affinity_hits, &c.affinity_pins, &c.affinity_evictions].map(|n| n.get());
        let affinity = if pins.iter().any(|&n| n > 0) {
            format!(
                " affinity_hits {} affinity_pins {} affinity_evictions {}",
                pins[0], pins[1], pins[2]
            )
        } else {
            String::new()
        };
        let overflow = match c.slot_overflow.get() {
            0 => String::new(),
            n => format!(" slot_overflow {n}"),
        };
        out!(
            "  worker {}: rx {} tx {} local_replies {} resets_sent {} too_big_sent {} neighbor_updates {} handed_over {} new_connections {} stateless_forwards {} conntrack_entries {} conntrack_evictions {} conntrack_expirations {}{affinity}{overflow} drops {}{}",
            w.id().0,
            c.rx_packets.get(),
            c.tx_packets.get(),
            c.local_replies.get(),
            c.resets_sent.get(),
            c.too_big_sent.get(),
            c.neighbor_updates.get(),
            c.handed_over.get(),
            c.new_connections.get(),
            c.stateless_forwards.get(),
            w.conntrack().len(),
            c.conntrack_evictions.get(),
            c.conntrack_expirations.get(),
            c.total_drops(),
            if drops.is_empty() {
                String::new()
            } else {
                format!(" ({})", drops.join(", "))
            }
        );
    }
    let c = ctl.get();
    out!(
        "  control: arp_requests {} gratuitous_arps {} neighbor_solicitations {} unsolicited_nas {} held {} released {} neighbor_drops {} send_failures {} neighbors {} neighbor_entries {}",
        c.arp_requests,
        c.gratuitous_arps,
        c.neighbor_solicitations,
        c.unsolicited_nas,
        c.held,
        c.released,
        c.neighbor_drops,
        c.send_failures,
        c.neighbors,
        c.neighbor_entries
    );
    out!("  rings: left_at_exit {left_in_rings}");
}

/// A per-process secret for the keyed hashes of the connection and affinity
/// tables: clients cannot aim for long probe runs or one crowded bucket.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_lines_escape_control_characters() {
        assert_eq!(
            super::printable("config x.toml: unknown key `a\nlbd: ok\u{1b}[2J`, expected é"),
            "config x.toml: unknown key `a\\nlbd: ok\\u{1b}[2J`, expected é"
        );
    }

    use super::*;

    /// A thread that panics, or returns before `stop` was set, stops lbd;
    /// one that returns because of `stop` leaves it as it was.
    #[test]
    fn a_thread_that_ends_early_stops_lbd() {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let r = std::thread::spawn(move || {
            let _g = StopOnExit::new(s, "a worker");
            panic!("a bug");
        })
        .join();
        assert!(r.is_err());
        assert!(stop.load(Ordering::Relaxed), "a panic sets stop");

        let stop = Arc::new(AtomicBool::new(false));
        let g = StopOnExit::new(stop.clone(), "the control thread");
        assert!(g.stop_lbd(), "an early return stops lbd");
        assert!(stop.load(Ordering::Relaxed), "an early return sets stop");
        // Set already (the normal end, or another thread's failure): this
        // thread's end is not reported as what stopped lbd.
        assert!(!g.stop_lbd());
        drop(g);
        let g = StopOnExit::new(stop.clone(), "a worker");
        assert!(!g.stop_lbd(), "a thread that returns because of stop");
        assert!(stop.load(Ordering::Relaxed));
    }
}
