//! Where the gRPC service listens (`lbd --grpc ADDR`).
//!
//! The default is the unix socket [`DEFAULT_SOCKET`], mode 0600, so that
//! only root can change the balancer. The socket is bound under a temporary
//! name, chmodded and hard-linked into place (a link fails where a rename
//! would replace what another lbd put there meanwhile), so it is never
//! reachable with a wider mode; a stale socket left by a dead lbd is removed, a live one
//! (something accepts on it) is an error, and anything that is not a socket
//! is never deleted. On shutdown the socket is removed if it is still ours.
//!
//! TCP only when an address such as `127.0.0.1:50051` or `[::1]:50051` is
//! given; then TLS (with client certificates when a client CA is given) is
//! available, and a plain-text listener on a non-loopback address logs a
//! loud warning: anyone who reaches it can change the balancer.

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use crate::grpc::{self, RouterError, ServerInfo, SharedPlane};

/// lbd's default control socket.
pub const DEFAULT_SOCKET: &str = "/run/lbd/lbd.sock";

/// How long in-flight calls may take to finish once shutdown is asked for.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How often [`Listener::serve`] collects the plane's replaced snapshots.
pub const GC_PERIOD: Duration = Duration::from_secs(1);

/// A unix socket path or a TCP address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A unix socket.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

impl Default for ListenAddr {
    fn default() -> ListenAddr {
        ListenAddr::Unix(PathBuf::from(DEFAULT_SOCKET))
    }
}

impl FromStr for ListenAddr {
    type Err = String;

    /// `unix:PATH`, a path containing `/`, or `IP:PORT` (`[IPv6]:PORT`).
    fn from_str(s: &str) -> Result<ListenAddr, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err("unix: needs a socket path".into());
            }
            return Ok(ListenAddr::Unix(PathBuf::from(p)));
        }
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(ListenAddr::Tcp(a));
        }
        if s.contains('/') {
            return Ok(ListenAddr::Unix(PathBuf::from(s)));
        }
        Err(format!(
            "{s:?} is neither a socket path (/run/lbd/lbd.sock, unix:PATH) nor an IP:PORT (127.0.0.1:50051, [::1]:50051)"
        ))
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            ListenAddr::Tcp(a) => write!(f, "{a}"),
        }
    }
}

/// PEM files for TLS on a TCP listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPaths {
    /// The server's certificate chain.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
    /// CA that client certificates must chain to; `None`: no client
    /// certificates asked for.
    pub client_ca: Option<PathBuf>,
}

/// `--grpc` and its TLS options.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListenConfig {
    /// Where to listen.
    pub addr: ListenAddr,
    /// TLS, TCP only.
    pub tls: Option<TlsPaths>,
}

/// Why the listener could not be set up or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// TLS was asked for on a unix socket.
    #[error("{addr}: TLS applies to TCP listeners only; the unix socket is protected by its mode 0600")]
    TlsOnUnix {
        /// The socket.
        addr: ListenAddr,
    },
    /// The socket's directory could not be created.
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another process accepts on the socket.
    #[error("{}: another process (another lbd?) is listening on this socket", path.display())]
    InUse {
        /// The socket.
        path: PathBuf,
    },
    /// Something other than a socket is in the way.
    #[error("{}: exists and is not a socket; not removing it", path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// A file operation on the socket failed.
    #[error("{}: cannot {what}: {source}", path.display())]
    Socket {
        /// The path.
        path: PathBuf,
        /// What was tried.
        what: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Binding the TCP address failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A TLS file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    ReadTls {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TLS material was rejected: why, from the innermost error.
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// The services could not be assembled.
    #[error(transparent)]
    Router(#[from] RouterError),
    /// The server failed while serving.
    #[error("gRPC server on {addr}: {source}")]
    Serve {
        /// Where it listened.
        addr: ListenAddr,
        /// The transport error.
        source: tonic::transport::Error,
    },
}

enum Socket {
    Unix {
        listener: UnixListener,
        path: PathBuf,
        /// (device, inode) of our socket file, to remove only our own.
        id: (u64, u64),
    },
    Tcp(TcpListener),
}

/// A bound listener: errors in the address, socket or TLS files (their
/// contents included: the certificate and key are parsed here) show up
/// here, before lbd starts forwarding.
pub struct Listener {
    socket: Socket,
    addr: ListenAddr,
    /// The server, with its TLS acceptor built if TLS is on.
    server: Server,
    tls: bool,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("addr", &self.addr)
            .field("tls", &self.tls)
            .finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ListenError> {
    std::fs::read(path).map_err(|source| ListenError::ReadTls {
        path: path.to_path_buf(),
        source,
    })
}

fn tls_config(t: &TlsPaths) -> Result<ServerTlsConfig, ListenError> {
    let mut cfg = ServerTlsConfig::new().identity(Identity::from_pem(read(&t.cert)?, read(&t.key)?));
    if let Some(ca) = &t.client_ca {
        cfg = cfg.client_ca_root(Certificate::from_pem(read(ca)?));
    }
    Ok(cfg)
}

/// Whether a socket a dead process left behind is at `path` (false:
/// nothing there); an error for a live one, for anything that is not a
/// socket, or when `path` cannot be inspected.
fn stale_socket(path: &Path) -> Result<bool, ListenError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(ListenError::Socket {
                path: path.to_path_buf(),
                what: "inspect",
                source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ListenError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(ListenError::InUse {
            path: path.to_path_buf(),
        });
    }
    Ok(true)
}

/// Removes a socket a dead process left behind; refuses to touch a live
/// one or anything that is not a socket.
fn remove_stale(path: &Path) -> Result<(), ListenError> {
    if !stale_socket(path)? {
        return Ok(());
    }
    tracing::info!(path = %path.display(), "removing stale control socket");
    std::fs::remove_file(path).map_err(|source| ListenError::Socket {
        path: path.to_path_buf(),
        what: "remove the stale socket",
        source,
    })
}

fn bind_unix(path: &Path) -> Result<Socket, ListenError> {
    let sock_err = |what: &'static str| {
        move |source| ListenError::Socket {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|source| ListenError::CreateDir {
        path: dir.clone(),
        source,
    })?;
    remove_stale(path)?;
    // Bind in a private directory (mode 0700, so nobody else can reach
    // the socket whatever the umask made its mode), restrict the socket to
    // 0600, then link it into place: it is never reachable by others,
    // at its public path or on the way there.
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "lbd.sock".into());
    let private = dir.join(format!(".{name}.{}.d", std::process::id()));
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(|source| ListenError::CreateDir {
            path: private.clone(),
            source,
        })?;
    let tmp = private.join("s");
    let bound = UnixListener::bind(&tmp).map_err(|source| ListenError::Socket {
        path: tmp.clone(),
        what: "bind",
        source,
    });
    let finish = |listener: UnixListener| -> Result<Socket, ListenError> {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .map_err(sock_err("set mode 0600 on"))?;
        // A link, not a rename: it fails (EEXIST) rather than replacing
        // what another process put at the path since `remove_stale`
        // looked (two lbds starting at once on one path).
        std::fs::hard_link(&tmp, path).map_err(sock_err("move into place"))?;
        let m = std::fs::symlink_metadata(path).map_err(sock_err("inspect"))?;
        Ok(Socket::Unix {
            listener,
            path: path.to_path_buf(),
            id: (m.dev(), m.ino()),
        })
    };
    let r = bound.and_then(finish);
    let _ = std::fs::remove_dir_all(&private);
    r
}

/// What [`bind`] would refuse, found without binding or creating anything,
/// so that lbd can refuse to start before it touches a device: TLS on a
/// unix socket; TLS files that cannot be read or parsed; a unix socket
/// whose directory cannot exist (a file in the way), that is not a socket,
/// or that another process accepts on; a TCP address that cannot be bound.
/// [`bind`] checks again: the host can change in between.
pub fn check(cfg: &ListenConfig) -> Result<(), ListenError> {
    match &cfg.addr {
        ListenAddr::Unix(path) => {
            if cfg.tls.is_some() {
                return Err(ListenError::TlsOnUnix {
                    addr: cfg.addr.clone(),
                });
            }
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            // The nearest ancestor that exists must be a directory, or
            // `bind` could not create the socket's directory.
            let mut d = dir;
            loop {
                match std::fs::metadata(d) {
                    Ok(m) if m.is_dir() => break,
                    Ok(_) => {
                        return Err(ListenError::CreateDir {
                            path: dir.to_path_buf(),
                            source: std::io::Error::new(
                                std::io::ErrorKind::NotADirectory,
                                format!("{} is not a directory", d.display()),
                            ),
                        })
                    }
                    Err(_) => match d.parent() {
                        Some(p) if !p.as_os_str().is_empty() => d = p,
                        _ => break,
                    },
                }
            }
            // Nothing there or a stale socket (which `bind` replaces) is
            // fine; a live one, a non-socket or an unusable path is not.
            stale_socket(path).map(drop)
        }
        ListenAddr::Tcp(addr) => {
            if let Some(t) = &cfg.tls {
                Server::builder()
                    .tls_config(tls_config(t)?)
                    .map_err(|e| ListenError::Tls(crate::cli::root_cause(&e)))?;
            }
            // Bound and closed at once (std sets SO_REUSEADDR, as tokio
            // does, so `bind` can take the address right after).
            std::net::TcpListener::bind(addr).map_err(|source| ListenError::Bind { addr: *addr, source })?;
            Ok(())
        }
    }
}

/// The gRPC server's settings: HTTP/2 keepalive pings, so that a client
/// that went away (its host died mid-upload) is noticed within a minute
/// and its calls dropped, and a bulk write's permit
/// ([`grpc::MAX_CONCURRENT_WRITES`]) with them.
fn server_builder() -> Server {
    Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
}

/// Binds the listener; must run inside a tokio runtime.
pub async fn bind(cfg: &ListenConfig) -> Result<Listener, ListenError> {
    match &cfg.addr {
        ListenAddr::Unix(path) => {
            if cfg.tls.is_some() {
                return Err(ListenError::TlsOnUnix {
                    addr: cfg.addr.clone(),
                });
            }
            Ok(Listener {
                socket: bind_unix(path)?,
                addr: cfg.addr.clone(),
                server: server_builder(),
                tls: false,
            })
        }
        ListenAddr::Tcp(addr) => {
            let tls = cfg.tls.as_ref().map(tls_config).transpose()?;
            let mut server = server_builder();
            if let Some(tls) = tls.clone() {
                // Parses the certificate and key: a file that is readable
                // but not PEM of its kind fails here, not once lbd forwards.
                server = server
                    .tls_config(tls)
                    .map_err(|e| ListenError::Tls(crate::cli::root_cause(&e)))?;
            }
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| ListenError::Bind { addr: *addr, source })?;
            let local = listener.local_addr().unwrap_or(*addr);
            if tls.is_none() && !addr.ip().is_loopback() {
                tracing::warn!(
                    addr = %local,
                    "gRPC control API on a non-loopback TCP address WITHOUT TLS: anyone who can reach it can change the load balancer; give --grpc-tls-cert/--grpc-tls-key (and a client CA) or listen on a unix socket or loopback"
                );
            }
            Ok(Listener {
                socket: Socket::Tcp(listener),
                addr: ListenAddr::Tcp(local),
                server,
                tls: tls.is_some(),
            })
        }
    }
}

impl Listener {
    /// Where it listens (a TCP port 0 resolved to the real port).
    pub fn addr(&self) -> &ListenAddr {
        &self.addr
    }

    /// Serves the API until `shutdown` completes, then ends Watch streams,
    /// waits up to [`SHUTDOWN_GRACE`] for in-flight calls, and removes the
    /// unix socket. Meanwhile it collects the plane's garbage every
    /// [`GC_PERIOD`].
    pub async fn serve(
        self,
        plane: SharedPlane,
        info: ServerInfo,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ListenError> {
        let (router, closer) = grpc::router(self.server, std::sync::Arc::clone(&plane), info).await?;
        // After `shutdown`, in-flight calls get SHUTDOWN_GRACE to finish;
        // then the server is dropped, which closes whatever connections a
        // stuck or idle client still holds open.
        let (stopping_tx, mut stopping) = tokio::sync::watch::channel(false);
        let signal = async move {
            shutdown.await;
            closer.close();
            stopping_tx.send_replace(true);
        };
        let deadline = async move {
            let _ = stopping.wait_for(|&s| s).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
            tracing::warn!(
                "gRPC clients still connected after {SHUTDOWN_GRACE:?}; closing their connections"
            );
        };
        // Snapshots replaced while no commit follows must still be freed
        // here, off the workers (see the plane's graveyard). This runs on a
        // runtime thread, so it never waits for the lock: a plane that is
        // busy is committing, and every commit collects at its end.
        let gc = async move {
            let mut tick = tokio::time::interval(GC_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Ok(mut p) = plane.try_lock() {
                    p.collect_garbage();
                }
            }
        };
        let deadline_or_gc = async move {
            tokio::select! {
                _ = deadline => {}
                _ = gc => {}
            }
        };
        let addr = self.addr;
        tracing::info!(%addr, "gRPC control API listening");
        let result = match self.socket {
            Socket::Unix { listener, path, id } => {
                let r = tokio::select! {
                    r = router.serve_with_incoming_shutdown(UnixListenerStream::new(listener), signal) => r,
                    _ = deadline_or_gc => Ok(()),
                };
                if let Ok(m) = std::fs::symlink_metadata(&path) {
                    if (m.dev(), m.ino()) == id {
                        let _ = std::fs::remove_file(&path);
                    }
                }
                r
            }
            Socket::Tcp(listener) => tokio::select! {
                r = router.serve_with_incoming_shutdown(TcpListenerStream::new(listener), signal) => r,
                _ = deadline_or_gc => Ok(()),
            },
        };
        result.map_err(|source| ListenError::Serve { addr, source })
    }
}

/// Binds `config` and serves until `shutdown` completes: what lbd runs on
/// its control thread.
pub async fn serve(
    plane: SharedPlane,
    info: ServerInfo,
    config: ListenConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ListenError> {
    bind(&config).await?.serve(plane, info, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse() {
        assert_eq!(
            "unix:/tmp/x.sock".parse(),
            Ok(ListenAddr::Unix("/tmp/x.sock".into()))
        );
        assert_eq!(
            "/run/lbd/lbd.sock".parse(),
            Ok(ListenAddr::Unix(DEFAULT_SOCKET.into()))
        );
        assert_eq!("./lbd.sock".parse(), Ok(ListenAddr::Unix("./lbd.sock".into())));
        assert_eq!(
            "127.0.0.1:50051".parse(),
            Ok(ListenAddr::Tcp("127.0.0.1:50051".parse().unwrap()))
        );
        assert_eq!(
            "[::1]:50051".parse(),
            Ok(ListenAddr::Tcp("[::1]:50051".parse().unwrap()))
        );
        assert!("localhost".parse::<ListenAddr>().is_err());
        assert!("unix:".parse::<ListenAddr>().is_err());
        assert_eq!(ListenAddr::default().to_string(), "unix:/run/lbd/lbd.sock");
    }

    #[tokio::test]
    async fn unix_socket_mode_stale_and_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/lbd.sock");
        let cfg = ListenConfig {
            addr: ListenAddr::Unix(path.clone()),
            tls: None,
        };
        let l = bind(&cfg).await.unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // Live: refused.
        assert!(matches!(bind(&cfg).await.unwrap_err(), ListenError::InUse { .. }));
        // Dead: replaced.
        drop(l);
        let l2 = bind(&cfg).await.unwrap();
        drop(l2);
        // Not a socket: left alone.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "precious").unwrap();
        assert!(matches!(
            bind(&cfg).await.unwrap_err(),
            ListenError::NotASocket { .. }
        ));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
        // No temporary names left behind.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[tokio::test]
    async fn tls_needs_tcp_and_readable_files() {
        let dir = tempfile::tempdir().unwrap();
        let tls = TlsPaths {
            cert: dir.path().join("missing.pem"),
            key: dir.path().join("missing.key"),
            client_ca: None,
        };
        let e = bind(&ListenConfig {
            addr: ListenAddr::Unix(dir.path().join("s")),
            tls: Some(tls.clone()),
        })
        .await
        .unwrap_err();
        assert!(matches!(e, ListenError::TlsOnUnix { .. }));
        let e = bind(&ListenConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            tls: Some(tls),
        })
        .await
        .unwrap_err();
        assert!(e.to_string().contains("missing.pem"), "{e}");
    }

    /// `check` refuses what `bind` would, and creates nothing.
    #[tokio::test]
    async fn check_finds_what_bind_refuses_without_binding() {
        let dir = tempfile::tempdir().unwrap();
        let unix = |p: PathBuf| ListenConfig {
            addr: ListenAddr::Unix(p),
            tls: None,
        };
        // Free, in a directory still to create: fine, and not created.
        check(&unix(dir.path().join("sub/lbd.sock"))).unwrap();
        assert!(!dir.path().join("sub").exists());
        let live = dir.path().join("live.sock");
        let _l = bind(&unix(live.clone())).await.unwrap();
        assert!(matches!(
            check(&unix(live)).unwrap_err(),
            ListenError::InUse { .. }
        ));
        // A socket left behind by an lbd that died (SIGKILL): nobody
        // listens, `bind` replaces it, so `check` accepts it.
        let stale = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(stale.exists());
        check(&unix(stale)).unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(
            check(&unix(file.clone())).unwrap_err(),
            ListenError::NotASocket { .. }
        ));
        let e = check(&unix(file.join("sub/lbd.sock"))).unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        let cert = dir.path().join("c.pem");
        std::fs::write(&cert, "not a certificate\n").unwrap();
        let tls = Some(TlsPaths {
            cert: cert.clone(),
            key: cert,
            client_ca: None,
        });
        let e = check(&ListenConfig {
            addr: ListenAddr::Unix(dir.path().join("s")),
            tls: tls.clone(),
        })
        .unwrap_err();
        assert!(matches!(e, ListenError::TlsOnUnix { .. }));
        let e = check(&ListenConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            tls,
        })
        .unwrap_err();
        assert!(matches!(e, ListenError::Tls(_)), "{e}");
        // A TCP address in use.
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = check(&ListenConfig {
            addr: ListenAddr::Tcp(held.local_addr().unwrap()),
            tls: None,
        })
        .unwrap_err();
        assert!(matches!(e, ListenError::Bind { .. }), "{e}");
    }

    /// Readable files that hold no certificate or key fail at bind, before
    /// lbd forwards, not when the server starts (where the error left lbd
    /// running without its API).
    #[tokio::test]
    async fn tls_files_that_do_not_parse_fail_at_bind() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("c.pem");
        let key = dir.path().join("k.pem");
        std::fs::write(&cert, "not a certificate\n").unwrap();
        std::fs::write(&key, "not a key\n").unwrap();
        let e = bind(&ListenConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            tls: Some(TlsPaths {
                cert,
                key,
                client_ca: None,
            }),
        })
        .await
        .unwrap_err();
        assert!(matches!(e, ListenError::Tls(_)), "{e}");
        assert!(!e.to_string().contains("transport error"), "the cause, once: {e}");
    }
}
