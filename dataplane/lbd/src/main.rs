//! lbd: a userspace DPDK L4 load balancer.
//!
//! Start-up order: parse flags and config (errors are one line and exit 1),
//! check PCI devices and hugepages, initialise EAL, check that every
//! `--pci`/`--vdev` became a port, configure each port with one rx and one
//! tx queue per worker, start the ports, launch the workers, then wait for
//! SIGINT/SIGTERM on the main lcore. Shutdown reverses it: workers stop and
//! are joined, ports stop, final counters are printed, ports close, EAL is
//! cleaned up, exit 0.

mod cli;
mod config;
mod preflight;
mod worker;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use dpdk::{Eal, Mempool, Port, PortConfig, RssStatus};
use lb_dataplane::local::LocalAddrs;
use lb_dataplane::wire::MacAddr;

use crate::cli::{parse_lcores, vdev_name, Cli};
use crate::config::Config;
use crate::worker::{StatsCell, WorkerIo, WorkerStats};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                e.exit();
            }
            // One line: clap's first line, without its usage block.
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("lbd: {} (see lbd --help)", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    init_logging();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lbd: {e:#}");
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

fn run(cli: Cli) -> anyhow::Result<()> {
    let lcores = parse_lcores(&cli.lcores)?;
    let config = match &cli.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let pci = preflight::check_pci(&cli.pci)?;
    if pci.is_empty() && cli.vdev.is_empty() {
        bail!("no ports: pass --pci BDF for a NIC or --vdev SPEC for a virtual device");
    }
    if !cli.no_huge {
        preflight::check_hugepages()?;
    }

    // Signals first: a SIGTERM during start-up must still stop us cleanly.
    // A second SIGINT/SIGTERM while stopping exits at once with status 1.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, stop.clone())
            .context("installing signal handler")?;
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handler")?;
    }

    let eal_args = cli.eal_args(&lcores, &pci);
    tracing::debug!(?eal_args, "initialising EAL");
    let eal = Eal::init(&eal_args)?;

    // Every requested device must have become a port.
    for bdf in &pci {
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
    if !config.interfaces.is_empty() && config.interfaces.len() != nports as usize {
        bail!(
            "the config has {} [[interface]] tables but DPDK has {nports} ports: give one per port, in port order",
            config.interfaces.len()
        );
    }

    let workers = lcores.workers();
    let queues = u16::try_from(workers).context("too many workers")?;
    let per_port = (1024 + 1024 + 2 * dpdk::BURST_MAX as u32) * workers as u32;
    let nmbufs = (per_port * nports as u32 + 2048).next_power_of_two().max(8192) - 1;
    let pool = Arc::new(Mempool::new(
        &eal,
        "lbd_mbufs",
        nmbufs,
        256,
        dpdk_sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
        None,
    )?);

    let mut ports = Vec::new();
    let mut local = Vec::new();
    for id in 0..nports {
        let conf = PortConfig {
            rx_queues: queues,
            tx_queues: queues,
            ..PortConfig::default()
        };
        let port = Port::configure(&eal, id, &conf, pool.clone())?;
        let info = port.info();
        match port.rss() {
            RssStatus::SingleQueue => {}
            RssStatus::Enabled(hf) => {
                tracing::info!(port = id, "RSS on over IP and L4 ports (rss_hf {hf:#x})")
            }
            RssStatus::Unsupported => tracing::warn!(
                port = id,
                driver = %info.driver,
                "the driver has no IP/L4 RSS: every packet lands on queue 0"
            ),
        }
        let mac = port.mac();
        let iface = config.interfaces.get(id as usize);
        let addrs = LocalAddrs::new(MacAddr(mac.0), iface.map(|i| i.address.addr))
            .with_context(|| format!("port {id} ({})", info.name))?;
        match iface {
            Some(iface) => {
                tracing::info!(
                    port = id, name = %info.name, driver = %info.driver, %mac, address = %iface.address,
                    gateway = ?iface.gateway, queues, "port configured"
                );
            }
            None => {
                tracing::warn!(port = id, name = %info.name, %mac, "port has no address: give one in --config")
            }
        }
        local.push(addrs);
        ports.push(port);
    }
    let local: Arc<[LocalAddrs]> = local.into();
    for p in &ports {
        p.start()?;
        let l = p.link();
        tracing::info!(
            port = p.id(),
            up = l.up,
            speed_mbps = l.speed_mbps,
            "port started"
        );
    }

    let mut ios = Vec::new();
    for q in 0..queues {
        let rx = ports
            .iter()
            .map(|p| p.rx_queue(q))
            .collect::<Result<Vec<_>, _>>()?;
        let tx = ports
            .iter()
            .map(|p| p.tx_queue(q))
            .collect::<Result<Vec<_>, _>>()?;
        ios.push(WorkerIo {
            index: q as usize,
            rx,
            tx,
        });
    }
    let cells: Vec<Arc<StatsCell>> = (0..workers).map(|_| Arc::new(StatsCell::default())).collect();

    let finals: Vec<WorkerStats> = if eal.worker_lcores().is_empty() {
        tracing::info!(
            lcore = lcores.main(),
            "forwarding on the main lcore (single lcore)"
        );
        let io = ios.pop().expect("one worker");
        vec![worker::run(io, local.clone(), stop.clone(), cells[0].clone())]
    } else {
        let mut handles = Vec::new();
        for (io, (lcore, cell)) in ios.into_iter().zip(eal.worker_lcores().iter().zip(&cells)) {
            let (local, stop, cell) = (local.clone(), stop.clone(), cell.clone());
            let index = io.index;
            handles.push(eal.launch(*lcore, move || {
                worker::run(io, local, stop, cell);
                0
            })?);
            tracing::info!(worker = index, lcore = lcore.0, "worker started");
        }
        tracing::info!("lbd running; SIGINT or SIGTERM stops it");
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for h in handles {
            let rc = h.join();
            if rc != 0 {
                tracing::error!(rc, "a worker ended abnormally");
            }
        }
        cells.iter().map(|c| c.read()).collect()
    };

    tracing::info!("stopping");
    for p in &ports {
        p.stop()?;
    }
    print_summary(&ports, &finals);
    drop(ports);
    drop(pool);
    drop(eal);
    Ok(())
}

fn print_summary(ports: &[Port], workers: &[WorkerStats]) {
    println!("final counters:");
    for p in ports {
        match p.stats() {
            Ok(s) => println!(
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
            Err(e) => println!("  port {}: {e}", p.id()),
        }
    }
    for (i, w) in workers.iter().enumerate() {
        let drops: Vec<String> = w
            .drops
            .nonzero()
            .map(|(r, n)| format!("{}={n}", r.name()))
            .collect();
        println!(
            "  worker {i}: rx {} tx {} local_replies {} neighbor_updates {} drops {}{}",
            w.rx_packets,
            w.tx_packets,
            w.local_replies,
            w.neighbor_updates,
            w.drops.total(),
            if drops.is_empty() {
                String::new()
            } else {
                format!(" ({})", drops.join(", "))
            }
        );
    }
}
