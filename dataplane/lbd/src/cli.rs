//! Command line: lbd's own flags, and the EAL arguments they translate to.
//!
//! `lbd --lcores 2-7 --pci 0000:03:00.0` is the production form. The first
//! lcore of `--lcores` is the main lcore (control thread); the others are
//! workers. Everything after `--` goes to EAL untouched.

use std::path::PathBuf;

use clap::Parser;
use lb_control::listen::ListenAddr;

/// lbd: a userspace DPDK L4 load balancer.
#[derive(Debug, Parser)]
#[command(name = "lbd", version, about, long_about = None)]
pub struct Cli {
    /// Lcores to run on, in DPDK list syntax: `2-7`, `0,2,4`, or with CPU
    /// placement `0@0,1@1,2@1` (several lcores may share a CPU). The first
    /// is the main lcore (control thread); the rest are workers. A single
    /// lcore does both.
    #[arg(long, value_name = "LIST", default_value = "0", value_parser = lcores_arg)]
    pub lcores: Lcores,

    /// A PCI device to drive, e.g. `0000:03:00.0` or `03:00.0` (repeatable,
    /// each device once). It must be bound to a DPDK-capable driver
    /// (vfio-pci, uio_pci_generic, or a bifurcated driver such as
    /// mlx5_core).
    #[arg(long = "pci", value_name = "BDF", value_parser = pci_arg)]
    pub pci: Vec<String>,

    /// A DPDK virtual device, e.g. `net_af_packet0,iface=veth0` (repeatable,
    /// each device name once).
    #[arg(long = "vdev", value_name = "SPEC", value_parser = vdev_arg)]
    pub vdev: Vec<String>,

    /// Run without hugepages (ordinary memory; for labs and tests).
    #[arg(long)]
    pub no_huge: bool,

    /// Memory for DPDK in MiB, 64 to 1048576 (default with --no-huge: 512;
    /// otherwise as needed from the hugepages).
    #[arg(long = "mem", value_name = "MB", value_parser = clap::value_parser!(u32).range(MEM_MIN_MB as i64..=MEM_MAX_MB as i64))]
    pub mem: Option<u32>,

    /// Prefix for DPDK's runtime files; distinct per lbd on one host. 1 to
    /// 64 letters, digits, `-`, `_` or `.`, not starting with `.`.
    #[arg(long, value_name = "NAME", default_value = "lbd", value_parser = file_prefix_arg)]
    pub file_prefix: String,

    /// Configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Where the gRPC control API listens: a unix socket path
    /// (`/run/lbd/lbd.sock`, `unix:PATH`) or a TCP `ADDRESS:PORT`
    /// (`127.0.0.1:50051`, `[::1]:50051`). The default socket is mode 0600:
    /// only root on the node can change the balancer.
    #[arg(long, value_name = "ADDR", default_value = "/run/lbd/lbd.sock", value_parser = grpc_arg)]
    pub grpc: ListenAddr,

    /// TLS certificate (PEM) for a TCP --grpc listener.
    #[arg(long, value_name = "FILE", requires = "grpc_tls_key")]
    pub grpc_tls_cert: Option<PathBuf>,

    /// TLS private key (PEM) for a TCP --grpc listener.
    #[arg(long, value_name = "FILE", requires = "grpc_tls_cert")]
    pub grpc_tls_key: Option<PathBuf>,

    /// CA (PEM) that client certificates must chain to; with it, clients
    /// without a valid certificate are refused.
    #[arg(long, value_name = "FILE", requires = "grpc_tls_cert")]
    pub grpc_client_ca: Option<PathBuf>,

    /// Where the Prometheus metrics endpoint listens (`GET /metrics`), a
    /// TCP `ADDRESS:PORT` such as `127.0.0.1:9650` or `[::1]:9650`. Off by
    /// default. No TLS and no authentication: bind a management address.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,

    /// The desired state: loaded at start before the ports forward (a
    /// corrupt or unreadable file is an error), made durable at every
    /// commit (FILE plus an append-only FILE.journal). Without it, the
    /// state lives in memory only.
    #[arg(long, value_name = "FILE")]
    pub state_file: Option<PathBuf>,

    /// This node's name: services with `traffic_policy = "local"` send new
    /// connections only to backends whose `node` is this name. Overrides
    /// the config file's `node`.
    #[arg(long, value_name = "NAME", value_parser = node_name)]
    pub node_name: Option<String>,

    /// Connections tracked per worker (IPv4; IPv6 gets a sixteenth), fixed
    /// at start: about 96 bytes each.
    #[arg(long, value_name = "N", default_value_t = 1 << 20, value_parser = clap::value_parser!(u32).range(1024..=(1 << 26)))]
    pub conntrack_size: u32,

    /// Client-IP affinity pins (client, service → backend) for the whole
    /// node, shared by the workers and fixed at start: 16 bytes each,
    /// rounded up to a power of two. When full, a new pin replaces the one
    /// that expires first (`affinity_evictions`).
    #[arg(long, value_name = "N", default_value_t = 1 << 18, value_parser = clap::value_parser!(u32).range(64..=(1 << 26)))]
    pub affinity_size: u32,

    /// Do IPv4 header checksums in software even where the NIC could
    /// verify received ones and fill sent ones (by default lbd uses those
    /// offloads on every port that has them; see the README).
    #[arg(long)]
    pub no_checksum_offload: bool,

    /// Receive frames to every MAC address, not just the port's (plus
    /// broadcast and multicast). Off by default: a frame flooded to another
    /// host, such as a peer balancer that shares the VIPs, is not handled
    /// twice. For a segment that sends lbd's traffic to another MAC (a
    /// shared virtual MAC).
    #[arg(long)]
    pub promiscuous: bool,

    /// Further arguments for EAL, passed through untouched.
    #[arg(last = true, value_name = "EAL ARGS")]
    pub eal_args: Vec<String>,
}

fn node_name(s: &str) -> Result<String, String> {
    crate::config::check_node_name(s)
}

/// `--lcores`, checked by clap so that a bad list is a usage error (exit
/// 2) like any other flag's; clap names the flag.
fn lcores_arg(s: &str) -> Result<Lcores, String> {
    parse_lcores(s).map_err(|e| {
        let m = e.to_string();
        m.strip_prefix("--lcores: ").unwrap_or(&m).to_string()
    })
}

fn grpc_arg(s: &str) -> Result<ListenAddr, String> {
    s.parse()
}

/// The smallest `--mem`: EAL turns anything less (0 included) into its own
/// 64 MiB floor without a word.
pub const MEM_MIN_MB: u32 = 64;
/// The largest `--mem` (1 TiB): EAL reads `-m` with `atoi`, and a value past
/// `i32::MAX` would wrap instead of failing.
pub const MEM_MAX_MB: u32 = 1 << 20;

/// `--pci`, normalised (`03:00.0` is `0000:03:00.0`): a malformed address
/// is a usage error (exit 2), one that names no device on this host is
/// found later, by `preflight::check_pci` (exit 1).
fn pci_arg(s: &str) -> Result<String, String> {
    normalise_bdf(s).ok_or_else(|| "not a PCI address (expected e.g. 0000:03:00.0 or 03:00.0)".to_string())
}

/// `--vdev`: a device name before any arguments.
fn vdev_arg(s: &str) -> Result<String, String> {
    if vdev_name(s).is_empty() {
        return Err("no device name (expected e.g. net_af_packet0,iface=veth0)".into());
    }
    Ok(s.to_string())
}

/// `--file-prefix`: EAL makes it a directory name under /var/run/dpdk and
/// the start of its hugepage files' names, so it must be a plain name.
fn file_prefix_arg(s: &str) -> Result<String, String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if s.is_empty() || s.len() > 64 || !s.chars().all(ok) || s.starts_with('.') {
        return Err("expected 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'".into());
    }
    Ok(s.to_string())
}

/// The lcores of `--lcores`, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lcores {
    /// Lcore ids; the first is the main lcore.
    pub ids: Vec<u32>,
    /// True when the `lcore@cpu` form was used (passed to EAL's `--lcores`).
    pub placed: bool,
    /// The CPU of each lcore, in the order of `ids` (the lcore id itself
    /// unless placed).
    pub cpus: Vec<u32>,
    /// The list as given.
    pub spec: String,
}

impl Lcores {
    /// The main lcore.
    pub fn main(&self) -> u32 {
        self.ids[0]
    }

    /// Number of workers: every lcore but the main one, or 1 when the main
    /// lcore is the only one (it then forwards too).
    pub fn workers(&self) -> usize {
        (self.ids.len() - 1).max(1)
    }

    /// CPUs where a polling worker shares the CPU with another lcore (the
    /// main one, or another worker), with the lcores on each. A single
    /// lcore that does both jobs is not counted: that is its design.
    pub fn crowded_cpus(&self) -> Vec<(u32, Vec<u32>)> {
        if self.ids.len() < 2 {
            return Vec::new();
        }
        let mut by_cpu: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
        for (&l, &cpu) in self.ids.iter().zip(&self.cpus) {
            by_cpu.entry(cpu).or_default().push(l);
        }
        // Two or more lcores on one CPU include a worker: there is one main.
        by_cpu.into_iter().filter(|(_, l)| l.len() > 1).collect()
    }
}

/// Errors in `--lcores`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LcoresError {
    /// Empty list.
    #[error("--lcores: the list is empty")]
    Empty,
    /// An item is not a number, a range or `lcore@cpu`.
    #[error("--lcores: {0:?} is not an lcore id, a range like 2-7, or lcore@cpu")]
    BadItem(String),
    /// A range runs backwards.
    #[error("--lcores: range {0:?} runs backwards")]
    Backwards(String),
    /// The same lcore twice.
    #[error("--lcores: lcore {0} appears twice")]
    Duplicate(u32),
    /// Beyond DPDK's RTE_MAX_LCORE.
    #[error("--lcores: lcore {0} is beyond the maximum {1}")]
    TooLarge(u32, u32),
}

fn num(s: &str, item: &str) -> Result<u32, LcoresError> {
    s.trim()
        .parse::<u32>()
        .map_err(|_| LcoresError::BadItem(item.to_string()))
}

/// Parses `--lcores`.
pub fn parse_lcores(spec: &str) -> Result<Lcores, LcoresError> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err(LcoresError::Empty);
    }
    let mut ids = Vec::new();
    let mut cpus = Vec::new();
    let mut placed = false;
    for item in spec.split(',') {
        if item.trim().is_empty() {
            return Err(LcoresError::BadItem(item.to_string()));
        }
        let (lc, cpu) = if let Some((l, cpu)) = item.split_once('@') {
            placed = true;
            (vec![num(l, item)?], Some(num(cpu, item)?))
        } else if let Some((a, b)) = item.split_once('-') {
            let (a, b) = (num(a, item)?, num(b, item)?);
            if b < a {
                return Err(LcoresError::Backwards(item.to_string()));
            }
            // Checked before the range is built: `0-4000000000` must not
            // allocate gigabytes to be refused.
            if b >= dpdk_sys::RTE_MAX_LCORE {
                return Err(LcoresError::TooLarge(
                    a.max(dpdk_sys::RTE_MAX_LCORE),
                    dpdk_sys::RTE_MAX_LCORE - 1,
                ));
            }
            ((a..=b).collect(), None)
        } else {
            (vec![num(item, item)?], None)
        };
        for l in lc {
            if l >= dpdk_sys::RTE_MAX_LCORE {
                return Err(LcoresError::TooLarge(l, dpdk_sys::RTE_MAX_LCORE - 1));
            }
            if ids.contains(&l) {
                return Err(LcoresError::Duplicate(l));
            }
            ids.push(l);
            cpus.push(cpu.unwrap_or(l));
        }
    }
    Ok(Lcores {
        ids,
        placed,
        cpus,
        spec: spec.to_string(),
    })
}

/// Normalises a PCI address: `03:00.0` becomes `0000:03:00.0`. Returns
/// `None` when it is not of the form `[dddd:]bb:dd.f` in hex.
pub fn normalise_bdf(s: &str) -> Option<String> {
    let full = if s.matches(':').count() == 1 {
        format!("0000:{s}")
    } else {
        s.to_string()
    };
    let (dom, rest) = full.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let hex = |x: &str, n: usize| x.len() == n && x.chars().all(|c| c.is_ascii_hexdigit());
    (hex(dom, 4) && hex(bus, 2) && hex(dev, 2) && hex(func, 1)).then(|| full.to_lowercase())
}

/// The device name DPDK gives a vdev's port: the spec up to the first comma.
pub fn vdev_name(spec: &str) -> &str {
    spec.split(',').next().unwrap_or(spec).trim()
}

impl Cli {
    /// Checks between flags that clap cannot make, each a usage error
    /// (exit 2) naming the flag: a device given twice, TLS on a unix
    /// socket, no device at all.
    pub fn check(&self) -> Result<(), String> {
        // `--pci` values are normalised already: two spellings of one
        // device compare equal.
        for (i, p) in self.pci.iter().enumerate() {
            if self.pci[..i].contains(p) {
                return Err(format!("--pci {p}: given twice (each device once)"));
            }
        }
        for (i, v) in self.vdev.iter().enumerate() {
            let name = vdev_name(v);
            if self.vdev[..i].iter().any(|w| vdev_name(w) == name) {
                return Err(format!(
                    "--vdev {name}: device name given twice (each device once)"
                ));
            }
        }
        if self.pci.is_empty() && self.vdev.is_empty() {
            return Err("no ports: pass --pci BDF for a NIC or --vdev SPEC for a virtual device".into());
        }
        if let (ListenAddr::Unix(_), Some(_)) = (&self.grpc, &self.grpc_tls_cert) {
            return Err(format!(
                "--grpc-tls-cert: TLS applies to a TCP --grpc only ({} is a unix socket, protected by its mode 0600)",
                self.grpc
            ));
        }
        Ok(())
    }

    /// DPDK's memory in MiB where it comes from ordinary memory (with
    /// `--no-huge`): `--mem`, 512 by default. `None` with hugepages.
    pub fn ordinary_dpdk_mem(&self) -> Option<u32> {
        self.no_huge.then(|| self.mem.unwrap_or(512))
    }

    /// The EAL command line for these flags.
    pub fn eal_args(&self, lcores: &Lcores, pci: &[String]) -> Vec<String> {
        let mut a = vec!["lbd".to_string()];
        if lcores.placed {
            a.push(format!("--lcores={}", lcores.spec));
        } else {
            let list: Vec<String> = lcores.ids.iter().map(u32::to_string).collect();
            a.push(format!("-l{}", list.join(",")));
        }
        a.push(format!("--main-lcore={}", lcores.main()));
        a.push(format!("--file-prefix={}", self.file_prefix));
        if let Some(m) = self.ordinary_dpdk_mem() {
            a.push("--no-huge".into());
            a.push(format!("-m{m}"));
        } else if let Some(m) = self.mem {
            a.push(format!("-m{m}"));
        }
        if pci.is_empty() {
            a.push("--no-pci".into());
        }
        for p in pci {
            a.push(format!("--allow={p}"));
        }
        for v in &self.vdev {
            a.push(format!("--vdev={v}"));
        }
        // lbd publishes its own counters; DPDK's telemetry socket stays off.
        if !self.eal_args.iter().any(|x| x == "--telemetry") {
            a.push("--no-telemetry".into());
        }
        // DPDK's informational lines drown lbd's own; warnings still show.
        if !self.eal_args.iter().any(|x| x.starts_with("--log-level")) {
            a.push("--log-level=lib.eal:warning".into());
        }
        a.extend(self.eal_args.iter().cloned());
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lcore_lists() {
        let l = parse_lcores("2-7").unwrap();
        assert_eq!(l.ids, vec![2, 3, 4, 5, 6, 7]);
        assert_eq!((l.main(), l.workers(), l.placed), (2, 5, false));
        assert_eq!(parse_lcores("0").unwrap().workers(), 1);
        assert_eq!(parse_lcores("0,2,4-5").unwrap().ids, vec![0, 2, 4, 5]);
        let p = parse_lcores("0@0,1@1,2@1").unwrap();
        assert_eq!((p.ids.clone(), p.placed), (vec![0, 1, 2], true));
        assert_eq!(p.cpus, vec![0, 1, 1]);
        assert_eq!(p.crowded_cpus(), vec![(1, vec![1, 2])]);
        // The control thread's CPU shared with a worker.
        assert_eq!(
            parse_lcores("0@1,1@1").unwrap().crowded_cpus(),
            vec![(1, vec![0, 1])]
        );
        // Not crowded: one lcore per CPU, or a single lcore doing both jobs.
        assert!(parse_lcores("2-7").unwrap().crowded_cpus().is_empty());
        assert!(parse_lcores("0@3").unwrap().crowded_cpus().is_empty());
        assert_eq!(parse_lcores(""), Err(LcoresError::Empty));
        assert_eq!(parse_lcores("a"), Err(LcoresError::BadItem("a".into())));
        assert_eq!(parse_lcores("0,,1"), Err(LcoresError::BadItem("".into())));
        assert_eq!(parse_lcores("5-2"), Err(LcoresError::Backwards("5-2".into())));
        assert_eq!(parse_lcores("1,0-2"), Err(LcoresError::Duplicate(1)));
        assert!(matches!(
            parse_lcores("9999"),
            Err(LcoresError::TooLarge(9999, _))
        ));
        // A huge range is refused by its bounds, before it is built (it
        // used to allocate 16 GiB first), naming its first lcore too large.
        let max = dpdk_sys::RTE_MAX_LCORE;
        assert_eq!(
            parse_lcores("0-4294967295"),
            Err(LcoresError::TooLarge(max, max - 1))
        );
        assert_eq!(
            parse_lcores("1,4000000000-4000000001"),
            Err(LcoresError::TooLarge(4_000_000_000, max - 1))
        );
    }

    #[test]
    fn bdf_forms() {
        assert_eq!(normalise_bdf("03:00.0").as_deref(), Some("0000:03:00.0"));
        assert_eq!(normalise_bdf("0000:AF:1f.7").as_deref(), Some("0000:af:1f.7"));
        assert_eq!(normalise_bdf("0000:03:00"), None);
        assert_eq!(normalise_bdf("eth0"), None);
        assert_eq!(vdev_name("net_af_packet0,iface=veth0"), "net_af_packet0");
    }

    #[test]
    fn flag_values() {
        let parse = |a: &[&str]| Cli::try_parse_from([&["lbd", "--vdev", "net_null0"][..], a].concat());
        for ok in ["lbd", "lbdtest-vdev-123", "lb_d.2"] {
            assert_eq!(parse(&["--file-prefix", ok]).unwrap().file_prefix, ok);
        }
        for bad in ["", "a/b", ".", "..", ".x", "a b", &"x".repeat(65)] {
            assert!(parse(&["--file-prefix", bad]).is_err(), "{bad:?}");
        }
        assert_eq!(parse(&["--mem", "64"]).unwrap().mem, Some(MEM_MIN_MB));
        assert_eq!(parse(&["--mem", "1048576"]).unwrap().mem, Some(MEM_MAX_MB));
        for bad in ["0", "63", "1048577", "4294967295"] {
            assert!(parse(&["--mem", bad]).is_err(), "{bad:?}");
        }
        // Two spellings of one device: the same device.
        let c = parse(&["--pci", "03:00.0", "--pci", "0000:03:00.0"]).unwrap();
        assert_eq!(c.pci, vec!["0000:03:00.0", "0000:03:00.0"]);
        assert!(c.check().unwrap_err().contains("--pci 0000:03:00.0"));
        let c = parse(&["--pci", "03:00.0", "--pci", "0000:03:00.1"]).unwrap();
        c.check().unwrap();
        let c = parse(&["--vdev", "net_null0,size=64"]).unwrap();
        assert!(c.check().unwrap_err().contains("--vdev net_null0"));
        let c = parse(&["--grpc-tls-cert", "c", "--grpc-tls-key", "k"]).unwrap();
        assert!(c.check().unwrap_err().contains("--grpc-tls-cert"));
        let c = parse(&[
            "--grpc",
            "127.0.0.1:1",
            "--grpc-tls-cert",
            "c",
            "--grpc-tls-key",
            "k",
        ])
        .unwrap();
        c.check().unwrap();
        assert!(Cli::try_parse_from(["lbd"])
            .unwrap()
            .check()
            .unwrap_err()
            .contains("no ports"));
    }

    #[test]
    fn eal_command_line() {
        let cli = Cli::parse_from([
            "lbd",
            "--lcores",
            "0-1",
            "--no-huge",
            "--vdev",
            "net_null0",
            "--",
            "--log-level=debug",
        ]);
        let a = cli.eal_args(&cli.lcores, &[]);
        assert_eq!(
            a,
            vec![
                "lbd",
                "-l0,1",
                "--main-lcore=0",
                "--file-prefix=lbd",
                "--no-huge",
                "-m512",
                "--no-pci",
                "--vdev=net_null0",
                "--no-telemetry",
                "--log-level=debug"
            ]
        );
        assert_eq!(cli.ordinary_dpdk_mem(), Some(512), "what the memory check counts");
        let cli = Cli::parse_from(["lbd", "--lcores", "2-3", "--pci", "0000:03:00.0", "--mem", "2048"]);
        assert_eq!(cli.ordinary_dpdk_mem(), None, "hugepages");
        let a = cli.eal_args(&cli.lcores, &["0000:03:00.0".into()]);
        assert!(a.contains(&"--allow=0000:03:00.0".to_string()));
        assert!(a.contains(&"-m2048".to_string()));
        assert!(!a.contains(&"--no-pci".to_string()));
    }
}
