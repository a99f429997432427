//! `lb-k8s-sync`: the command line (see the crate doc and the README).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use lb_control::cli::{self, output, ClientTls, ServerAddr};
use lb_control::model::Cidr;
use lb_k8s_sync::desired::{FrontendKind, Options};
use lb_k8s_sync::sync::{self, Ended, Mode, Settings};
use lb_proto::v1 as pb;

#[derive(Debug, Parser)]
#[command(
    name = "lb-k8s-sync",
    version,
    about = "Keep lbd's services, frontends and backends equal to the cluster's Services and EndpointSlices"
)]
struct Cli {
    /// lbd's control address: a socket path, unix:PATH, http://HOST:PORT,
    /// https://HOST:PORT or HOST:PORT.
    #[arg(long, env = "LBCTL_SERVER", default_value = lb_control::listen::DEFAULT_SOCKET)]
    server: ServerAddr,
    /// CA certificate (PEM) for an https:// server.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Client certificate (PEM) for an https:// server that asks for one.
    #[arg(long)]
    cert: Option<PathBuf>,
    /// Client key (PEM).
    #[arg(long)]
    key: Option<PathBuf>,
    /// Seconds to wait for each answer from lbd (1-3600).
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
    /// The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config,
    /// else in-cluster: the pod's service account).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Watch only this namespace (default: all).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Take only Services with these labels (a label selector:
    /// `lbd.io/expose=true`, `tier in (edge)`).
    #[arg(long, short = 'l')]
    selector: Option<String>,
    /// Which addresses of a Service become frontends, comma-separated:
    /// load-balancer (status.loadBalancer.ingress IPs), external-ip,
    /// cluster-ip, node-port (the nodePort on lbd's own addresses).
    #[arg(long, value_delimiter = ',', default_value = "load-balancer,external-ip")]
    frontends: Vec<FrontendKind>,
    /// Node ports go only on lbd's addresses in these ranges,
    /// comma-separated CIDRs, as kube-proxy's --nodeport-addresses: per
    /// family, all of a family no range has (default: all of lbd's
    /// addresses but its SNAT addresses).
    #[arg(long, value_name = "CIDRS", value_delimiter = ',')]
    node_port_addresses: Vec<Cidr>,
    /// Take LoadBalancer Services of this spec.loadBalancerClass (default:
    /// those without a class).
    #[arg(long, value_name = "CLASS")]
    load_balancer_class: Option<String>,
    /// The forwarding mode of a Service without the lbd.io/forwarding-mode
    /// annotation.
    #[arg(long, value_parser = ["fullnat", "dnat"], default_value = "fullnat")]
    mode: String,
    /// Honour `externalTrafficPolicy: Local` as lbd's `local` policy (only
    /// backends on lbd's own --node-name), as kube-proxy on a cluster node
    /// does. Without it such a Service is balanced over all its endpoints,
    /// as a gateway that runs no pods must.
    #[arg(long)]
    node_local: bool,
    /// Milliseconds the watches must be quiet after a change before it is
    /// pushed (0-60000).
    #[arg(long, value_name = "MS", default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    debounce_ms: u64,
    /// Seconds between pushes of an unchanged state, which put right an lbd
    /// that lost it (10-86400).
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(10..=86_400))]
    resync: u64,
    /// Seconds between checks that lbd has not restarted (its instance id):
    /// one that did is pushed the state at once (1-3600).
    #[arg(long, value_name = "SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    lbd_check: u64,
    /// Serve Prometheus metrics (GET /metrics) and a health check for the
    /// pod's probes (GET /healthz) on this address (IP:PORT).
    #[arg(long, value_name = "IP:PORT")]
    metrics: Option<std::net::SocketAddr>,
    /// Create no Kubernetes Events for what is skipped (by default a
    /// Warning on the Service, reason NotBalancedByLbd, for each).
    #[arg(long)]
    no_events: bool,
    /// Push once, when the cluster has been listed, and exit.
    #[arg(long, conflicts_with = "dry_run")]
    once: bool,
    /// List the cluster, print what would be pushed (and what is skipped,
    /// and why), and exit without changing lbd (it connects only to ask
    /// for lbd's addresses, with node-port frontends).
    #[arg(long)]
    dry_run: bool,
}

fn main() -> ExitCode {
    let cli = match cli::parse_args::<Cli>("lb-k8s-sync") {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !cli.node_port_addresses.is_empty() && !cli.frontends.contains(&FrontendKind::NodePort) {
        eprintln!(
            "lb-k8s-sync: --node-port-addresses needs node-port in --frontends (see lb-k8s-sync --help)"
        );
        return ExitCode::from(2);
    }
    init_tracing();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lb-k8s-sync: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lb-k8s-sync: {}", cli::error_line(&*e));
            ExitCode::from(1)
        }
    }
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("LB_K8S_SYNC_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false)
        .compact()
        .init();
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("--kubeconfig {}: {}", path.display(), cli::error_line(&e)))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!("--kubeconfig {}: {}", path.display(), cli::error_line(&e)))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| anyhow::anyhow!("no Kubernetes API to talk to: {}", cli::error_line(&e)))?,
    };
    let api = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)
        .map_err(|e| anyhow::anyhow!("Kubernetes client for {api}: {}", cli::error_line(&e)))?;
    let settings = Settings {
        server: cli.server,
        tls: ClientTls {
            ca: cli.ca,
            cert: cli.cert,
            key: cli.key,
        },
        timeout: Duration::from_secs(cli.timeout),
        options: Options {
            types: cli.frontends.into_iter().collect::<BTreeSet<_>>(),
            mode: if cli.mode == "dnat" {
                pb::ForwardingMode::Dnat
            } else {
                pb::ForwardingMode::Fullnat
            },
            load_balancer_class: cli.load_balancer_class,
            node_local: cli.node_local,
            node_addresses: Vec::new(),
        },
        node_port_ranges: cli.node_port_addresses,
        namespace: cli.namespace,
        selector: cli.selector,
        debounce: Duration::from_millis(cli.debounce_ms),
        lbd_check: Duration::from_secs(cli.lbd_check),
        resync: Duration::from_secs(cli.resync),
        stats: Arc::default(),
        events: !cli.no_events,
    };
    if let Some(addr) = cli.metrics {
        let listener = lb_control::metrics::MetricsListener::bind(addr)
            .map_err(|e| anyhow::anyhow!("--metrics: {e}"))?;
        let endpoint = lb_k8s_sync::metrics::Endpoint(Arc::clone(&settings.stats));
        // Ends with the runtime.
        tokio::spawn(async move {
            if let Err(e) = listener.serve_exporter(endpoint, std::future::pending()).await {
                tracing::error!("--metrics: {}", cli::error_line(&e));
            }
        });
    }
    let mode = if cli.dry_run {
        Mode::DryRun
    } else if cli.once {
        Mode::Once
    } else {
        Mode::Follow
    };
    tracing::info!(kubernetes = %api, lbd = %settings.server, "watching Services and EndpointSlices");
    match sync::run(client, &settings, mode, shutdown()).await? {
        Ended::Mapped(d) => {
            let l = pb::ListResponse {
                services: d.services,
                frontends: d.frontends,
                backends: d.backends,
                revision: 0,
            };
            print!("{}", output::services_table(&output::service_rows(&l)));
            println!();
            print!("{}", output::frontends_table(&output::frontend_rows(&l)));
            println!();
            print!("{}", output::backends_table(&output::backend_rows(&l)));
            if !d.skipped.is_empty() {
                println!();
                for s in &d.skipped {
                    println!("skipped {s}");
                }
            }
        }
        Ended::Stopped(_) => tracing::info!("stopped"),
    }
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
