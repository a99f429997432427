//! lb-bench: a DPDK traffic generator, checker and backend emulator for
//! lbd, and the io-forward baseline it is compared with.
//!
//! - `lb-bench gen`: on one lcore and one port (normally a memif link to
//!   lbd, one-armed), sends client packets toward a VIP, checks what comes
//!   back, answers as the backends, measures Mpps, loss, violations and
//!   round-trip latency; a progress line every second, a summary at the
//!   end in text (stdout) and JSON (`--json`).
//!   With `--dut reflect` it measures an io forwarder instead (dpdk-testpmd
//!   in io mode: frames come back untouched), the I/O limit of the same
//!   link: `bench/run.sh` measures both in one run.
//! - `lb-bench churn`: changes a backend's state through lbd's gRPC API at
//!   a fixed rate while a `gen` run measures.

mod churn;
mod frame;
mod gen;
mod report;
mod search;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand, ValueEnum};
use dpdk::{Eal, Mempool, Port, PortConfig};

use crate::frame::Proto;
use crate::gen::{Dut, Generator, Io, Plan, Timing, Traffic};
use crate::report::{Latency, Summary};

#[derive(Debug, Parser)]
#[command(
    name = "lb-bench",
    version,
    about = "Traffic generator, checker and baseline for benchmarking lbd"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Generate, check, answer as the backends, measure.
    Gen(GenArgs),
    /// Alternate a backend between maintenance and active through gRPC.
    Churn(ChurnArgs),
}

#[derive(Debug, Args)]
struct DpdkArgs {
    /// The DPDK device, e.g. `net_memif0,role=client,socket=/run/lbb.sock`.
    #[arg(long)]
    vdev: String,
    /// The lcore to run on.
    #[arg(long, default_value_t = 0)]
    lcore: u32,
    /// Run without hugepages.
    #[arg(long)]
    no_huge: bool,
    /// DPDK runtime file prefix (distinct per process).
    #[arg(long, default_value = "lb-bench")]
    file_prefix: String,
    /// Seconds to measure, after the warm-up.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DutArg {
    /// lbd in full-NAT: backends must see an SNAT address.
    Fullnat,
    /// lbd in DNAT: backends must see the client.
    Dnat,
    /// An io forwarder (testpmd): frames come back untouched.
    Reflect,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TrafficArg {
    /// Open every flow once, then ACK streams over all flows.
    Established,
    /// SYN only, every packet from the next flow.
    New,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ProtoArg {
    Tcp,
    Udp,
}

#[derive(Debug, Args)]
struct GenArgs {
    #[command(flatten)]
    dpdk: DpdkArgs,
    /// What the device under test does.
    #[arg(long, value_enum, default_value_t = DutArg::Fullnat)]
    dut: DutArg,
    /// Traffic kind.
    #[arg(long, value_enum, default_value_t = TrafficArg::Established)]
    traffic: TrafficArg,
    /// Protocol.
    #[arg(long, value_enum, default_value_t = ProtoArg::Tcp)]
    proto: ProtoArg,
    /// A frontend, VIP:PORT (repeatable: flows are spread over them
    /// round-robin; default 10.0.0.100:80). All share the backends.
    #[arg(long = "vip")]
    vips: Vec<SocketAddrV4>,
    /// A backend (repeatable; default 10.0.1.1-3:8080).
    #[arg(long = "backend")]
    backends: Vec<SocketAddrV4>,
    /// The first SNAT address (full-NAT).
    #[arg(long, default_value = "10.0.0.200")]
    snat: Ipv4Addr,
    /// Consecutive SNAT addresses from --snat, as in lbd's config (snat.addresses).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=65536))]
    snat_count: u32,
    /// First client address.
    #[arg(long, default_value = "10.128.0.1")]
    client_base: Ipv4Addr,
    /// Client addresses.
    #[arg(long, default_value_t = 16)]
    clients: u32,
    /// Source ports per client address (flows = clients x ports).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=64000))]
    ports: u32,
    /// Frame size on the wire including the 4-byte FCS (64 = minimum).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(64..=1518))]
    size: u32,
    /// Client packets per second, in millions (0: as fast as possible).
    #[arg(long, default_value_t = 0.0, conflicts_with = "pdr")]
    rate: f64,
    /// Search the highest rate whose loss stays within this fraction
    /// (0.005 = 0.5%) after an unlimited trial; every trial lasts
    /// --seconds.
    #[arg(long, value_name = "LOSS")]
    pdr: Option<f64>,
    /// Bisection steps of the --pdr search.
    #[arg(long, default_value_t = 6, requires = "pdr")]
    steps: u32,
    /// Repeats of a lossy --pdr trial before its rate counts as too high.
    #[arg(long, default_value_t = 1, requires = "pdr")]
    retries: u32,
    /// With established traffic, this share of the packets (0 to 1) are
    /// SYNs of new connections from further clients, never answered.
    #[arg(long, default_value_t = 0.0)]
    new_share: f64,
    /// Do not answer as the backends (forward direction only).
    #[arg(long)]
    no_reply: bool,
    /// Seconds before measuring (connections open, caches warm).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds at most, after the load of a trial stops, that late packets
    /// are still counted (the wait ends as soon as all are in).
    #[arg(long, default_value_t = 0.3)]
    drain: f64,
    /// After the summary is written, stay connected without polling the
    /// port until the device under test closes the link, for at most this
    /// many seconds (or until SIGINT/SIGTERM). Stop the device once the
    /// JSON summary exists: DPDK 22.11's memif PMD can crash the server
    /// when its client disconnects while the server is polling.
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    linger: f64,
    /// A name for the summary.
    #[arg(long, default_value = "run")]
    scenario: String,
    /// Also write the summary as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ChurnArgs {
    /// lbd's gRPC address (socket path, unix:PATH or http://HOST:PORT).
    #[arg(long)]
    server: String,
    /// The backend to toggle, ADDRESS:PORT.
    #[arg(long)]
    backend: String,
    /// Changes per second.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(n) => {
            eprintln!(
                "lb-bench: {n} violations: the device under test sent packets it must not (see the counters)"
            );
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("lb-bench: {}", lb_control::cli::error_line(&*e));
            ExitCode::FAILURE
        }
    }
}

/// Runs the command; returns the violations seen.
fn run(cli: Cli) -> anyhow::Result<u64> {
    match cli.cmd {
        Cmd::Churn(a) => {
            let n = churn::run(&a.server, &a.backend, a.rate, a.seconds)?;
            println!("churn: {n} backend state changes accepted in {:.1} s", a.seconds);
            Ok(0)
        }
        Cmd::Gen(a) => generate(&a),
    }
}

fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("signal handler")?;
    }
    Ok(stop)
}

/// EAL on one lcore with one port.
fn open(a: &DpdkArgs) -> anyhow::Result<(Eal, Port, Arc<Mempool>)> {
    let mut args = vec![
        "lb-bench".to_string(),
        format!("-l{}", a.lcore),
        format!("--file-prefix={}", a.file_prefix),
        "--no-pci".into(),
        format!("--vdev={}", a.vdev),
        "--no-telemetry".into(),
        "--log-level=lib.eal:warning".into(),
    ];
    if a.no_huge {
        args.push("--no-huge".into());
        args.push("-m512".into());
    }
    let eal = Eal::init(&args)?;
    if eal.port_count() != 1 {
        bail!("--vdev {:?} did not become one port", a.vdev);
    }
    let pool = Arc::new(Mempool::new(&eal, "lbb", 16383, 256, 2176, None)?);
    let port = Port::configure(&eal, 0, &PortConfig::default(), pool.clone())?;
    port.start()?;
    Ok((eal, port, pool))
}

fn generate(a: &GenArgs) -> anyhow::Result<u64> {
    let stop = stop_flag()?;
    let backends: Vec<(Ipv4Addr, u16)> = if a.backends.is_empty() {
        (1..=3).map(|i| (Ipv4Addr::new(10, 0, 1, i), 8080)).collect()
    } else {
        a.backends.iter().map(|b| (*b.ip(), b.port())).collect()
    };
    if backends.len() > 100 {
        bail!("--backend: at most 100 backends (got {})", backends.len());
    }
    let plan = Plan {
        dut: match a.dut {
            DutArg::Fullnat => Dut::FullNat,
            DutArg::Dnat => Dut::Dnat,
            DutArg::Reflect => Dut::Reflect,
        },
        traffic: match a.traffic {
            TrafficArg::Established => Traffic::Established,
            TrafficArg::New => Traffic::NewFlows,
        },
        proto: match a.proto {
            ProtoArg::Tcp => Proto::Tcp,
            ProtoArg::Udp => Proto::Udp,
        },
        vips: if a.vips.is_empty() {
            vec![(Ipv4Addr::new(10, 0, 0, 100), 80)]
        } else {
            a.vips.iter().map(|v| (*v.ip(), v.port())).collect()
        },
        backends,
        snat: a.snat,
        snat_count: a.snat_count,
        client_base: a.client_base,
        clients: a.clients,
        ports: a.ports,
        frame_len: a.size as usize - 4,
        reply: !a.no_reply,
        new_share: a.new_share,
    };
    if !(0.0..=1.0).contains(&a.new_share) {
        bail!("--new-share {}: give a share from 0 to 1", a.new_share);
    }
    if a.new_share > 0.0 && plan.traffic != Traffic::Established {
        bail!("--new-share mixes new connections into --traffic established");
    }
    let last_client = u64::from(u32::from(a.client_base)) + plan.tuples().div_ceil(u64::from(a.ports));
    if plan.tuples() > u64::from(u32::MAX) || last_client > u64::from(u32::MAX) {
        bail!(
            "--clients {} x --ports {}: too many flows for the client address space",
            a.clients,
            a.ports
        );
    }
    if !(a.dpdk.seconds.is_finite() && a.dpdk.seconds > 0.0) {
        bail!("--seconds must be positive");
    }
    for (flag, v) in [
        ("--warmup", a.warmup),
        ("--drain", a.drain),
        ("--linger", a.linger),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            bail!("{flag} must be zero or positive, not {v}");
        }
    }
    let seconds = a.dpdk.seconds;
    let timing = Timing {
        warmup: Duration::from_secs_f64(a.warmup),
        duration: Duration::from_secs_f64(seconds),
        drain: Duration::from_secs_f64(a.drain),
    };
    let (eal, port, pool) = open(&a.dpdk)?;
    let tsc_hz = eal.tsc_hz();
    let mut io = Io {
        rx: port.rx_queue(0)?,
        tx: port.tx_queue(0)?,
        pool: pool.clone(),
    };
    eprintln!(
        "lb-bench gen: {} on {}, {} flows, {} B, {:?} {:?}",
        a.scenario,
        port.info().name,
        plan.flows(),
        a.size,
        plan.traffic,
        plan.proto
    );
    let mut g = Generator::new(&plan);
    let mut first = true;
    let mut trial = |rate: f64| {
        // Flows are opened by the first trial; later ones settle briefly.
        let t = Timing {
            warmup: if first {
                timing.warmup
            } else {
                Duration::from_millis(500)
            },
            ..timing
        };
        first = false;
        if rate > 0.0 {
            eprintln!("  trial at {:.3} Mpps", rate / 1e6);
        }
        let (c, lat, secs) = g.trial(&mut io, rate, t, &stop, |c, t| {
            eprintln!(
                "  {t:5.1} s: tx {:.3} Mpps, forward {:.3} Mpps, replies {:.3} Mpps, violations {}",
                c.tx_forward as f64 / t / 1e6,
                c.rx_forward as f64 / t / 1e6,
                c.rx_reply as f64 / t / 1e6,
                c.violations()
            );
        });
        let s = Summary::new(
            a.scenario.clone(),
            secs,
            plan.flows(),
            a.size as usize,
            &c,
            Latency::of(&lat, tsc_hz),
        );
        eprintln!("{}", s.text());
        s
    };
    let (json, violations) = match a.pdr {
        None => {
            let s = trial(a.rate * 1e6);
            println!("{}", s.text());
            (serde_json::to_string_pretty(&s)?, s.violations)
        }
        Some(limit) => {
            if !(0.0..1.0).contains(&limit) {
                bail!("--pdr {limit}: give the loss limit as a fraction below 1, e.g. 0.005");
            }
            let s = search::pdr(limit, a.steps, a.retries, &mut trial);
            println!(
                "{}: MRR {:.3} Mpps, PDR ({}% loss) {}; violations {}",
                a.scenario,
                s.mrr.through_mpps,
                limit * 100.0,
                s.pdr.as_ref().map_or("none passed".to_string(), |p| format!(
                    "{:.3} Mpps",
                    p.through_mpps
                )),
                s.violations
            );
            (serde_json::to_string_pretty(&s)?, s.violations)
        }
    };
    if let Some(p) = &a.json {
        write_whole(p, &(json + "\n"))?;
    }
    drop(io);
    if a.linger > 0.0 {
        linger(&port, Duration::from_secs_f64(a.linger), &stop);
    }
    port.stop()?;
    drop((port, pool, eal));
    Ok(violations)
}

/// Writes `text` to `path` whole or not at all (a temporary file renamed
/// over it), so that whoever waits for the file never reads half of it.
fn write_whole(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", PathBuf::from(&tmp).display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// How long `--linger` waits after the link went down before the port is
/// stopped: far more than the memif PMD's teardown takes.
const DISCONNECT_GRACE: Duration = Duration::from_millis(200);

/// `--linger`: waits, polling nothing but the link state, until the device
/// under test closes the link, `most` has passed, or a signal sets `stop`.
fn linger(port: &Port, most: Duration, stop: &AtomicBool) {
    use std::sync::atomic::Ordering::Relaxed;
    eprintln!(
        "lb-bench: summary written; waiting up to {:.1} s for the device to close the link",
        most.as_secs_f64()
    );
    let end = std::time::Instant::now() + most;
    while port.link().up && !stop.load(Relaxed) && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    let how = if !port.link().up {
        // The memif PMD marks the link down first and only then tears the
        // connection down, in DPDK's interrupt thread; our `port.stop()`
        // runs the same teardown (`memif_disconnect`), and the two racing
        // freed memory twice ("EAL: Error: Invalid memory" at exit, once
        // in the 19 lb-bench processes of a `bench/run.sh` run). Let the
        // interrupt thread finish first.
        std::thread::sleep(DISCONNECT_GRACE);
        "the device closed the link"
    } else if stop.load(Relaxed) {
        "stopped by a signal"
    } else {
        "the link is still up: leaving anyway"
    };
    eprintln!("lb-bench: {how}");
}
