//! What `lbctl` needs besides its argument parsing: where the server is,
//! connecting to it, argument syntax (`ADDR:PORT/PROTO`, `ADDR[:PORT]`),
//! and [`output`] for tables, JSON and YAML.

pub mod output;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use lb_proto::v1::load_balancer_client::LoadBalancerClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::grpc::MAX_MESSAGE_BYTES;
use crate::listen::DEFAULT_SOCKET;
use crate::model::{FrontendKey, Protocol};

/// Where `lbctl` finds lbd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAddr {
    /// A unix socket.
    Unix(PathBuf),
    /// `http://host:port`.
    Http(String),
    /// `https://host:port`.
    Https(String),
}

impl Default for ServerAddr {
    fn default() -> ServerAddr {
        ServerAddr::Unix(PathBuf::from(DEFAULT_SOCKET))
    }
}

impl std::str::FromStr for ServerAddr {
    type Err = String;

    /// `unix:PATH`, `PATH` (with a `/`), `http://HOST:PORT`,
    /// `https://HOST:PORT`, or `HOST:PORT` (plain http); schemes in any
    /// case. Empty (`LBCTL_SERVER=` set but empty): the default socket.
    fn from_str(s: &str) -> Result<ServerAddr, String> {
        if s.is_empty() {
            return Ok(ServerAddr::default());
        }
        let scheme = |prefix: &str| {
            s.get(..prefix.len())
                .filter(|head| head.eq_ignore_ascii_case(prefix))
                .map(|_| &s[prefix.len()..])
        };
        if let Some(p) = scheme("unix://").or_else(|| scheme("unix:")) {
            if p.is_empty() {
                return Err("unix: needs a socket path".into());
            }
            return Ok(ServerAddr::Unix(PathBuf::from(p)));
        }
        if let Some(rest) = scheme("http://") {
            return Ok(ServerAddr::Http(format!("http://{rest}")));
        }
        if let Some(rest) = scheme("https://") {
            return Ok(ServerAddr::Https(format!("https://{rest}")));
        }
        if s.contains('/') {
            return Ok(ServerAddr::Unix(PathBuf::from(s)));
        }
        if s.parse::<SocketAddr>().is_ok()
            || s.rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            return Ok(ServerAddr::Http(format!("http://{s}")));
        }
        Err(format!(
            "{s:?} is not a server address (a socket path, unix:PATH, http://HOST:PORT, https://HOST:PORT or HOST:PORT)"
        ))
    }
}

impl std::fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            ServerAddr::Http(u) | ServerAddr::Https(u) => f.write_str(u),
        }
    }
}

/// Client TLS files for an `https://` server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// CA that the server's certificate must chain to.
    pub ca: Option<PathBuf>,
    /// Client certificate (when the server asks for one).
    pub cert: Option<PathBuf>,
    /// Client key.
    pub key: Option<PathBuf>,
}

/// Why `lbctl` could not reach lbd.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The options do not describe a usable connection.
    #[error("{0}")]
    Config(String),
    /// Something answered, but the TLS handshake failed: the options do
    /// not fit the server (a CA that did not sign lbd's certificate, a
    /// certificate for another name, a client certificate lbd refuses).
    #[error("TLS with lbd at {server} failed: {reason} (check --ca, --cert and --key, and that lbd's certificate names the host of the address)")]
    Tls {
        /// The address tried.
        server: ServerAddr,
        /// Why, on one line.
        reason: String,
    },
    /// Nothing answered.
    #[error("cannot connect to lbd at {server}: {reason} (is lbd running, and is this its --grpc address?)")]
    Unreachable {
        /// The address tried.
        server: ServerAddr,
        /// Why, on one line.
        reason: String,
    },
}

/// The innermost cause of an error, which for transport errors is the one
/// that says what happened (e.g. "No such file or directory").
pub fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// An error and its causes on one line, `what: why: why`, as `{:#}` of an
/// `anyhow::Error` prints them, but without a cause the line already ends
/// with as its last `: `-separated part: most errors here quote their
/// source in their own message (`config lbd.toml: No such file or
/// directory (os error 2)`), and printing the chain as well said it twice.
/// (Only a whole part: "read timed out" keeps its cause "timed out".)
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if line != text && !line.ends_with(&format!(": {text}")) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

/// Reads the PEM file of `flag`, which must hold a block of `kind`
/// (`CERTIFICATE`, `PRIVATE KEY`): otherwise TLS would fail later with a
/// message that names neither the flag nor the file, as if lbd were down.
fn read_pem(flag: &str, path: &PathBuf, kind: &str) -> Result<Vec<u8>, ConnectError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ConnectError::Config(format!("{flag} {}: cannot read it: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    let found = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{kind}-----")));
    if !found {
        return Err(ConnectError::Config(format!(
            "{flag} {}: no PEM {kind} in it",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Connects to lbd (eagerly, so an absent server is reported at once);
/// a call on the client that lbd has not answered within `timeout` fails
/// with a status the client made itself ([`is_local_failure`]).
pub async fn connect(
    server: &ServerAddr,
    tls: &ClientTls,
    timeout: Duration,
) -> Result<LoadBalancerClient<Channel>, ConnectError> {
    let uri = match server {
        ServerAddr::Unix(p) => format!("unix:{}", p.display()),
        ServerAddr::Http(u) | ServerAddr::Https(u) => u.clone(),
    };
    let mut endpoint = Endpoint::from_shared(uri)
        .map_err(|e| ConnectError::Config(format!("{server}: {}", root_cause(&e))))?
        .connect_timeout(Duration::from_secs(5).min(timeout))
        .timeout(timeout)
        // A peer that went away without a word (its host died, the
        // network dropped) ends `watch`'s idle stream too, as a lost
        // connection, instead of leaving it waiting forever.
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    if let ServerAddr::Https(_) = server {
        let Some(ca) = &tls.ca else {
            return Err(ConnectError::Config(format!(
                "{server}: https needs --ca (the CA that signed lbd's certificate)"
            )));
        };
        let mut cfg = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read_pem(
            "--ca",
            ca,
            "CERTIFICATE",
        )?));
        match (&tls.cert, &tls.key) {
            (Some(c), Some(k)) => {
                cfg = cfg.identity(Identity::from_pem(
                    read_pem("--cert", c, "CERTIFICATE")?,
                    read_pem("--key", k, "PRIVATE KEY")?,
                ))
            }
            (None, None) => {}
            _ => return Err(ConnectError::Config("--cert and --key go together".into())),
        }
        endpoint = endpoint
            .tls_config(cfg)
            .map_err(|e| ConnectError::Config(format!("{server}: TLS: {}", root_cause(&e))))?;
    } else if tls.ca.is_some() || tls.cert.is_some() || tls.key.is_some() {
        return Err(ConnectError::Config(format!(
            "{server}: --ca, --cert and --key need an https:// server"
        )));
    }
    let channel = endpoint.connect().await.map_err(|e| {
        let reason = root_cause(&e);
        if is_tls_failure(&reason) {
            ConnectError::Tls {
                server: server.clone(),
                reason,
            }
        } else {
            ConnectError::Unreachable {
                server: server.clone(),
                reason,
            }
        }
    })?;
    Ok(LoadBalancerClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES))
}

/// Whether a connection error's root cause is the TLS handshake's (as
/// rustls words its certificate errors and alerts) rather than a missing or
/// silent server.
fn is_tls_failure(root_cause: &str) -> bool {
    let r = root_cause.to_ascii_lowercase();
    r.contains("certificate") || r.contains("fatal alert") || r.contains("handshake")
}

/// True for a status that lbd did not send: the client's own (the
/// connection broke, the deadline passed), which tonic gives with the
/// underlying error as its source. lbd's statuses carry none.
pub fn is_local_failure(s: &tonic::Status) -> bool {
    std::error::Error::source(s).is_some()
}

/// Resolves when standard output is a pipe or socket whose reader has gone
/// (the `head` of `lbctl watch | head` has exited), which a program that
/// waits long between writes would otherwise learn only at its next write;
/// never where that cannot be told. A thread of its own waits in `poll(2)`
/// for the error the kernel reports on such a pipe (a plain thread, not
/// the runtime's blocking pool, which would hold the runtime's shutdown).
pub async fn stdout_gone() {
    use rustix::event::{poll, PollFd, PollFlags};
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let watcher = std::thread::Builder::new()
        .name("stdout-gone".into())
        .spawn(move || {
            let out = std::io::stdout();
            loop {
                // No events asked for: only the error and hang-up, which
                // are always reported.
                let mut fds = [PollFd::new(&out, PollFlags::empty())];
                match poll(&mut fds, None) {
                    Ok(_) if fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP) => {
                        let _ = tx.send(());
                        return;
                    }
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    // Not pollable (closed, say): cannot tell.
                    Err(_) => return,
                }
            }
        });
    if watcher.is_ok() && rx.await.is_ok() {
        return;
    }
    std::future::pending().await
}

/// The command line of the program `name` (`lbctl`, `lb-k8s-sync`),
/// parsed: a usage error is one line on stderr (`NAME: LINE (see NAME
/// --help)`, [`clap_error_line`]) and exit code 2; `--help` and
/// `--version` print and exit as clap's do.
pub fn parse_args<T: clap::Parser>(name: &str) -> Result<T, std::process::ExitCode> {
    T::try_parse().map_err(|e| match clap_error_line(&e) {
        None => e.exit(),
        Some(line) => {
            eprintln!("{name}: {line} (see {name} --help)");
            std::process::ExitCode::from(2)
        }
    })
}

/// A clap error as one line, for `lbctl` and `lbd`, whose errors are one
/// line: clap's first paragraph without `error: ` and without its usage
/// block. The paragraph can run over several lines (a missing argument is
/// named on the line after "the following required arguments were not
/// provided:"), so its lines are joined. A missing subcommand, for which
/// clap prints the whole help, is its usage line. `None` for `--help` and
/// `--version`, which print as clap prints them (`clap::Error::exit`).
pub fn clap_error_line(e: &clap::Error) -> Option<String> {
    use clap::error::ErrorKind;
    let text = e.render().to_string();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => None,
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => Some(
            text.lines()
                .find_map(|l| l.trim().strip_prefix("Usage: "))
                .map_or_else(
                    || "a command is missing".to_string(),
                    |u| format!("a command is missing: usage: {}", u.trim()),
                ),
        ),
        _ => {
            let first = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ");
            let first = first.trim_start_matches("error: ");
            Some(if first.is_empty() {
                "invalid arguments".to_string()
            } else {
                first.to_string()
            })
        }
    }
}

/// The canonical name of a gRPC code, as in `INVALID_ARGUMENT`.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Parses `ADDR:PORT/PROTO` (`[fd00::1]:80/udp`).
pub fn parse_frontend_key(s: &str) -> Result<FrontendKey, String> {
    let (ep, proto) = s
        .rsplit_once('/')
        .ok_or_else(|| format!("{s:?} is not ADDR:PORT/PROTO (e.g. 10.0.0.100:80/tcp)"))?;
    let protocol = match proto {
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        _ => return Err(format!("{proto:?} is not a protocol (tcp or udp)")),
    };
    let a = crate::model::parse_socket_addr(ep)
        .ok_or_else(|| format!("{ep:?} is not ADDR:PORT (e.g. 10.0.0.100:80 or [fd00::1]:80)"))?;
    if a.port() == 0 {
        return Err(format!("{ep:?}: port must be 1-65535"));
    }
    Ok(FrontendKey {
        addr: a.ip(),
        port: a.port(),
        protocol,
    })
}

/// Parses `ADDR:PORT` (`[fd00::1]:80`).
pub fn parse_endpoint(s: &str) -> Result<(IpAddr, u16), String> {
    let a = crate::model::parse_socket_addr(s)
        .ok_or_else(|| format!("{s:?} is not ADDR:PORT (e.g. 10.1.0.11:8080 or [fd00::1]:8080)"))?;
    if a.port() == 0 {
        return Err(format!("{s:?}: port must be 1-65535"));
    }
    Ok((a.ip(), a.port()))
}

/// Parses `ADDR` or `ADDR:PORT`: a bare IPv4 or IPv6 address, `[IPv6]`,
/// or `[IPv6]:PORT`.
pub fn parse_addr_maybe_port(s: &str) -> Result<(IpAddr, Option<u16>), String> {
    if let Ok(a) = s.parse::<IpAddr>() {
        return Ok((a, None));
    }
    if let Some(a) = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|a| a.parse::<std::net::Ipv6Addr>().ok())
    {
        return Ok((IpAddr::V6(a), None));
    }
    parse_endpoint(s).map(|(a, p)| (a, Some(p))).map_err(|_| {
        format!("{s:?} is not ADDR or ADDR:PORT (e.g. 10.1.0.11, 10.1.0.11:8080, fd00::1 or [fd00::1]:8080)")
    })
}

/// A `namespace/name` argument, checked before lbd is asked.
pub fn parse_service_name(s: &str) -> Result<String, String> {
    crate::model::check_service_name(s)?;
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cause the message already quotes is left out; one it does not is
    /// added, each once, in order.
    #[test]
    fn error_lines_say_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("config {path}: {source}")]
        struct Quoting {
            path: &'static str,
            source: std::io::Error,
        }
        let io = || {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "No such file or directory (os error 2)",
            )
        };
        let e = anyhow::Error::new(Quoting {
            path: "lbd.toml",
            source: io(),
        });
        assert_eq!(
            format!("{e:#}"),
            "config lbd.toml: No such file or directory (os error 2): No such file or directory (os error 2)",
            "anyhow says it twice"
        );
        assert_eq!(
            error_line(&*e),
            "config lbd.toml: No such file or directory (os error 2)"
        );
        let e = anyhow::Error::new(io())
            .context("reading the services file")
            .context("lbctl apply");
        assert_eq!(
            error_line(&*e),
            "lbctl apply: reading the services file: No such file or directory (os error 2)"
        );
        let e = anyhow::Error::new(Quoting {
            path: "lbd.toml",
            source: io(),
        })
        .context("starting");
        assert_eq!(
            error_line(&*e),
            "starting: config lbd.toml: No such file or directory (os error 2)"
        );
        // A cause that is the end of the line but not a whole part of it.
        let e = anyhow::Error::new(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"))
            .context("read timed out");
        assert_eq!(error_line(&*e), "read timed out: timed out");
    }

    #[test]
    fn server_addresses() {
        let p = |s: &str| s.parse::<ServerAddr>();
        assert_eq!(p("unix:/tmp/a.sock"), Ok(ServerAddr::Unix("/tmp/a.sock".into())));
        assert_eq!(
            p("unix:///tmp/a.sock"),
            Ok(ServerAddr::Unix("/tmp/a.sock".into()))
        );
        assert_eq!(p("/run/lbd/lbd.sock"), Ok(ServerAddr::default()));
        assert_eq!(
            p("127.0.0.1:50051"),
            Ok(ServerAddr::Http("http://127.0.0.1:50051".into()))
        );
        assert_eq!(
            p("[::1]:50051"),
            Ok(ServerAddr::Http("http://[::1]:50051".into()))
        );
        assert_eq!(p("lb1:50051"), Ok(ServerAddr::Http("http://lb1:50051".into())));
        assert_eq!(
            p("https://lb1:50051"),
            Ok(ServerAddr::Https("https://lb1:50051".into()))
        );
        assert!(p("lb1").is_err());
        assert!(p("unix:").is_err());
        // Schemes in any case; empty is the default socket.
        assert_eq!(p("HTTPS://lb1:1"), Ok(ServerAddr::Https("https://lb1:1".into())));
        assert_eq!(p("Http://lb1:1"), Ok(ServerAddr::Http("http://lb1:1".into())));
        assert_eq!(p("UNIX:/tmp/a.sock"), Ok(ServerAddr::Unix("/tmp/a.sock".into())));
        assert_eq!(p(""), Ok(ServerAddr::default()));
    }

    #[test]
    fn argument_syntax() {
        let k = parse_frontend_key("[fd00::1]:53/udp").unwrap();
        assert_eq!(k.to_string(), "[fd00::1]:53/udp");
        assert!(parse_frontend_key("10.0.0.1:80").is_err());
        assert!(parse_frontend_key("10.0.0.1:80/sctp").is_err());
        assert!(parse_frontend_key("10.0.0.1:0/tcp").is_err());
        assert_eq!(
            parse_addr_maybe_port("10.1.0.11").unwrap(),
            ("10.1.0.11".parse().unwrap(), None)
        );
        assert_eq!(
            parse_addr_maybe_port("10.1.0.11:8080").unwrap(),
            ("10.1.0.11".parse().unwrap(), Some(8080))
        );
        assert_eq!(
            parse_addr_maybe_port("fd00::1").unwrap(),
            ("fd00::1".parse().unwrap(), None)
        );
        assert_eq!(
            parse_addr_maybe_port("[fd00::1]:80").unwrap(),
            ("fd00::1".parse().unwrap(), Some(80))
        );
        assert!(parse_addr_maybe_port("10.1.0.11:x").is_err());
        assert_eq!(
            parse_addr_maybe_port("[fd00::1]").unwrap(),
            ("fd00::1".parse().unwrap(), None)
        );
        // Brackets must pair around an IPv6 address; no zones.
        for bad in [
            "[10.1.0.11",
            "10.1.0.11]]]",
            "fd00::1]",
            "[[fd00::1]]",
            "[10.1.0.11]",
            "[fe80::1%2]:80",
            "",
        ] {
            assert!(parse_addr_maybe_port(bad).is_err(), "{bad}");
        }
        assert!(parse_endpoint("[fe80::1%2]:80").is_err());
        assert!(parse_frontend_key("[fe80::1%2]:80/tcp").is_err());
        assert!(parse_service_name("").is_err());
        assert_eq!(parse_service_name("default/web").unwrap(), "default/web");
        assert_eq!(code_name(tonic::Code::InvalidArgument), "INVALID_ARGUMENT");
    }
}
