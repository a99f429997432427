//! `lbctl`: the command line for lbd's control API.
//!
//! Exit status: 0 on success; 1 when lbd refused the request (stderr:
//! `lbctl: <CODE>: <message>`); 2 for a usage error, a bad argument or
//! services file (checked before connecting), or TLS options that do not
//! fit the server (its handshake fails); 3 when lbd cannot be
//! reached, the connection breaks, or lbd does not answer within
//! `--timeout`. Every error is one line on stderr. Output to a pipe that
//! closes early (`| head`) ends lbctl quietly.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use lb_control::cli::output::{self, Format, Rates};
use lb_control::cli::{self, ClientTls, ConnectError, ServerAddr};
use lb_control::convert;
use lb_control::model::{BackendKey, BackendState, Change, Source};
use lb_control::services_file::ServicesFile;
use lb_proto::v1 as pb;
use lb_proto::v1::load_balancer_client::LoadBalancerClient;
use tonic::transport::Channel;

#[derive(Debug, Parser)]
#[command(name = "lbctl", version, about = "Control lbd, the DPDK L4 load balancer")]
struct Cli {
    /// lbd's control address: a socket path, unix:PATH, http://HOST:PORT,
    /// https://HOST:PORT or HOST:PORT.
    #[arg(long, global = true, env = "LBCTL_SERVER", default_value = lb_control::listen::DEFAULT_SOCKET)]
    server: ServerAddr,
    /// CA certificate (PEM) for an https:// server.
    #[arg(long, global = true)]
    ca: Option<PathBuf>,
    /// Client certificate (PEM) for an https:// server that asks for one.
    #[arg(long, global = true)]
    cert: Option<PathBuf>,
    /// Client key (PEM).
    #[arg(long, global = true)]
    key: Option<PathBuf>,
    /// Seconds to wait for each answer from lbd (1-3600).
    #[arg(
        long,
        global = true,
        value_name = "SECS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    timeout: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or replace the services, frontends and backends of a services
    /// file (source api), in one transaction; prints the new revision.
    Apply {
        /// The services file (TOML, as for lbd --config).
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
    },
    /// Delete a service (with its frontends and backends), a frontend or a
    /// backend.
    Delete {
        #[command(subcommand)]
        what: Delete,
    },
    /// List services, frontends or backends.
    Get {
        /// What to list.
        what: Kind,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputArg::Table)]
        output: OutputArg,
        /// Only this service's objects.
        #[arg(long, value_parser = cli::parse_service_name)]
        service: Option<String>,
        /// Only objects written by this source (k8s, api, config).
        #[arg(long, value_parser = output::parse_source)]
        source: Option<Source>,
        /// Only frontends or backends at this IP address.
        #[arg(long)]
        address: Option<std::net::IpAddr>,
    },
    /// Change the state of backends by address, in every service or one.
    Backend {
        /// drain (terminating), enable (active) or maintenance.
        action: BackendAction,
        /// ADDR or ADDR:PORT ([IPv6 address]:PORT).
        #[arg(value_name = "ADDR[:PORT]", value_parser = cli::parse_addr_maybe_port)]
        target: (std::net::IpAddr, Option<u16>),
        /// Only in this service.
        #[arg(long, value_parser = cli::parse_service_name)]
        service: Option<String>,
    },
    /// Counters per worker, port, control thread, frontend and backend, and drops.
    Stats {
        /// Repeat every SECS seconds (default 2) with rates, until interrupted.
        #[arg(
            long,
            value_name = "SECS",
            num_args = 0..=1,
            default_missing_value = "2",
            value_parser = clap::value_parser!(u64).range(1..=86_400)
        )]
        watch: Option<u64>,
    },
    /// lbd's version, instance, revisions, ports and workers.
    Info {
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputArg::Table)]
        output: OutputArg,
    },
    /// Print each commit (revision, source, changes) as lbd makes it,
    /// until interrupted or lbd ends the stream.
    Watch {
        /// Output format: text, or one JSON object per line, or YAML
        /// documents.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputArg::Table)]
        output: OutputArg,
    },
}

#[derive(Debug, Subcommand)]
enum Delete {
    /// Delete a service with its frontends and backends.
    Service {
        /// namespace/name
        #[arg(value_parser = cli::parse_service_name)]
        name: String,
    },
    /// Delete a frontend.
    Frontend {
        /// ADDR:PORT/PROTO, e.g. 10.0.0.100:80/tcp
        #[arg(value_name = "ADDR:PORT/PROTO", value_parser = cli::parse_frontend_key)]
        frontend: lb_control::model::FrontendKey,
    },
    /// Delete a backend of a service.
    Backend {
        /// namespace/name
        #[arg(value_parser = cli::parse_service_name)]
        service: String,
        /// ADDR:PORT
        #[arg(value_name = "ADDR:PORT", value_parser = cli::parse_endpoint)]
        address: (std::net::IpAddr, u16),
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Kind {
    Services,
    Frontends,
    Backends,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OutputArg {
    Table,
    Json,
    Yaml,
}

impl From<OutputArg> for Format {
    fn from(o: OutputArg) -> Format {
        match o {
            OutputArg::Table => Format::Table,
            OutputArg::Json => Format::Json,
            OutputArg::Yaml => Format::Yaml,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum BackendAction {
    /// Terminating: established connections only.
    Drain,
    /// Active.
    Enable,
    /// Maintenance: no new connections.
    Maintenance,
}

/// How a command failed, and so the exit status.
enum Failure {
    /// lbd answered with an error status.
    Status(tonic::Status),
    /// lbd could not be reached, or stopped answering.
    Unreachable(String),
    /// Usage, a file, or local output.
    Local(anyhow::Error),
    /// The reader of the output went away (`| head`): nothing to say.
    Quiet,
}

impl From<tonic::Status> for Failure {
    /// A status lbd sent is its refusal; one the client made itself (the
    /// connection broke, no answer in time) means lbd cannot be reached.
    fn from(s: tonic::Status) -> Failure {
        if cli::is_local_failure(&s) {
            let why = std::error::Error::source(&s)
                .map(cli::root_cause)
                .unwrap_or_default();
            Failure::Unreachable(if why.to_ascii_lowercase().contains("timeout") {
                "lbd did not answer in time (see --timeout)".to_string()
            } else if why.is_empty() || s.message().contains(&why) {
                format!("lost the connection to lbd: {}", s.message())
            } else {
                format!("lost the connection to lbd: {} ({why})", s.message())
            })
        } else {
            Failure::Status(s)
        }
    }
}

/// Writes `text` to stdout; a closed pipe ends lbctl quietly.
fn out(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Failure::Quiet),
        Err(e) => Err(Failure::Local(anyhow::anyhow!("writing the output: {e}"))),
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::Local(e)
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn main() -> ExitCode {
    // One line like every other error, exit 2; --help and --version print
    // as usual.
    let cli = match cli::parse_args::<Cli>("lbctl") {
        Ok(c) => c,
        Err(code) => return code,
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lbctl: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Status(s)) => {
            eprintln!("lbctl: {}: {}", cli::code_name(s.code()), one_line(s.message()));
            ExitCode::from(1)
        }
        Err(Failure::Unreachable(m)) => {
            eprintln!("lbctl: {}", one_line(&m));
            ExitCode::from(3)
        }
        Err(Failure::Local(e)) => {
            eprintln!("lbctl: {}", one_line(&lb_control::cli::error_line(&*e)));
            ExitCode::from(2)
        }
        Err(Failure::Quiet) => ExitCode::SUCCESS,
    }
}

async fn client(cli: &Cli) -> Result<LoadBalancerClient<Channel>, Failure> {
    let tls = ClientTls {
        ca: cli.ca.clone(),
        cert: cli.cert.clone(),
        key: cli.key.clone(),
    };
    cli::connect(&cli.server, &tls, Duration::from_secs(cli.timeout))
        .await
        .map_err(|e| match e {
            ConnectError::Unreachable { .. } => Failure::Unreachable(e.to_string()),
            // lbd answered: the TLS options do not fit it, a usage error.
            ConnectError::Tls { .. } => Failure::Local(anyhow::anyhow!(e.to_string())),
            ConnectError::Config(m) => Failure::Local(anyhow::anyhow!(m)),
        })
}

async fn apply(
    c: &mut LoadBalancerClient<Channel>,
    changes: Vec<Change>,
) -> Result<pb::ApplyResponse, Failure> {
    let req = pb::ApplyRequest {
        changes: changes.iter().map(convert::change_to_proto).collect(),
        source: convert::source_to_proto(Source::Api),
        expected_revision: 0,
    };
    Ok(c.apply(req).await?.into_inner())
}

async fn run(cli: Cli) -> Result<(), Failure> {
    // Check local input before connecting, so a bad file is reported as
    // such even when lbd is down.
    let file = match &cli.command {
        Command::Apply { file } => Some(ServicesFile::load(file, Source::Api).map_err(anyhow::Error::from)?),
        _ => None,
    };
    let mut c = client(&cli).await?;
    match cli.command {
        Command::Apply { .. } => {
            let changes = file.map(|f| f.to_changes()).unwrap_or_default();
            let sent = changes.len();
            out(&output::applied_text(&apply(&mut c, changes).await?, sent))?;
        }
        Command::Delete { what } => {
            let (change, text) = match what {
                Delete::Service { name } => (Change::DeleteService(name.clone()), format!("service {name}")),
                Delete::Frontend { frontend } => {
                    (Change::DeleteFrontend(frontend), format!("frontend {frontend}"))
                }
                Delete::Backend {
                    service,
                    address: (addr, port),
                } => {
                    let k = BackendKey { service, addr, port };
                    let text = format!("backend {k}");
                    (Change::DeleteBackend(k), text)
                }
            };
            let revision = apply(&mut c, vec![change]).await?.revision;
            out(&format!("revision {revision}: deleted {text}\n"))?;
        }
        Command::Get {
            what,
            output,
            service,
            source,
            address,
        } => {
            let req = pb::ListRequest {
                service: service.unwrap_or_default(),
                source: source.map(convert::source_to_proto).unwrap_or(0),
                address: address.map(|a| a.to_string()).unwrap_or_default(),
            };
            let list = c.list(req).await?.into_inner();
            let format = Format::from(output);
            let text = match what {
                Kind::Services => {
                    output::render(&output::service_rows(&list), format, output::services_table)
                }
                Kind::Frontends => {
                    output::render(&output::frontend_rows(&list), format, output::frontends_table)
                }
                Kind::Backends => {
                    output::render(&output::backend_rows(&list), format, output::backends_table)
                }
            }
            .map_err(anyhow::Error::from)?;
            out(&text)?;
        }
        Command::Backend {
            action,
            target,
            service,
        } => {
            let (addr, port) = target;
            let target = match port {
                Some(p) => lb_control::model::endpoint(addr, p),
                None => addr.to_string(),
            };
            let state = match action {
                BackendAction::Drain => BackendState::Terminating,
                BackendAction::Enable => BackendState::Active,
                BackendAction::Maintenance => BackendState::Maintenance,
            };
            let req = pb::SetBackendStateRequest {
                address: addr.to_string(),
                port: port.map(u32::from).unwrap_or(0),
                service: service.clone().unwrap_or_default(),
                state: convert::backend_state_to_proto(state),
            };
            let r = c.set_backend_state(req).await?.into_inner();
            if r.matched == 0 {
                let scope = service.map(|s| format!(" in service {s}")).unwrap_or_default();
                return Err(Failure::Status(tonic::Status::not_found(format!(
                    "no backend at {target}{scope}"
                ))));
            }
            out(&format!(
                "revision {}: {} backend{} at {target} set to {}\n",
                r.revision,
                r.matched,
                if r.matched == 1 { "" } else { "s" },
                state.name()
            ))?;
        }
        Command::Stats { watch } => {
            let mut previous: Option<(Instant, pb::GetStatsResponse)> = None;
            loop {
                let s = c.get_stats(pb::GetStatsRequest {}).await?.into_inner();
                let now = Instant::now();
                let rates = previous.take().map(|(t, p)| Rates {
                    seconds: now.duration_since(t).as_secs_f64(),
                    previous: p,
                });
                let Some(secs) = watch else {
                    out(&output::stats_text(&s, None))?;
                    break;
                };
                out(&format!(
                    "--- every {secs}s ---\n{}",
                    output::stats_text(&s, rates.as_ref())
                ))?;
                previous = Some((now, s));
                tokio::time::sleep(Duration::from_secs(secs)).await;
            }
        }
        Command::Watch { output } => {
            let format = Format::from(output);
            let mut events = c.watch(pb::WatchRequest {}).await?.into_inner();
            // `lbctl watch | head -3`: when head has gone, end now, not at
            // the next commit's write (which may be hours away).
            let gone = cli::stdout_gone();
            tokio::pin!(gone);
            loop {
                let e = tokio::select! {
                    e = events.message() => e?,
                    () = &mut gone => return Err(Failure::Quiet),
                };
                let Some(e) = e else { break };
                let text = match format {
                    Format::Table => output::watch_event_text(&e),
                    Format::Json => {
                        serde_json::to_string(&output::watch_event_value(&e)).map_err(anyhow::Error::from)?
                            + "\n"
                    }
                    Format::Yaml => {
                        "---\n".to_string()
                            + &serde_yaml::to_string(&output::watch_event_value(&e))
                                .map_err(anyhow::Error::from)?
                    }
                };
                out(&text)?;
            }
            // lbd ends a Watch with a status (UNAVAILABLE at shutdown); one
            // that just ends is not what a caller waits for either.
            return Err(Failure::Status(tonic::Status::unavailable(
                "lbd ended the Watch stream",
            )));
        }
        Command::Info { output } => {
            let i = c.get_info(pb::GetInfoRequest {}).await?.into_inner();
            let text = match Format::from(output) {
                Format::Table => output::info_text(&i),
                Format::Json => {
                    serde_json::to_string_pretty(&output::info_value(&i)).map_err(anyhow::Error::from)? + "\n"
                }
                Format::Yaml => {
                    serde_yaml::to_string(&output::info_value(&i)).map_err(anyhow::Error::from)?
                }
            };
            out(&text)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
