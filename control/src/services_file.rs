//! The services file: one TOML schema for `lbd --config` (whose services
//! are the `config` source) and `lbctl apply -f` (upserts with source api).
//!
//! ```toml
//! [snat]
//! addresses = ["10.1.0.1"]           # full-NAT source addresses of this node
//!
//! [[service]]
//! name = "default/web"
//! mode = "fullnat"                    # or "dnat"; default fullnat
//! traffic_policy = "cluster"          # or "local"; default cluster
//! session_affinity_timeout = "3h"     # optional: 30s, 10m, 3h, 1d, 1h30m, or seconds
//! source_ranges = ["0.0.0.0/0"]       # optional allow-list
//!
//! [[service.frontend]]
//! address = "10.0.0.100:80"           # [fd00::1]:80 for IPv6
//! protocol = "tcp"                    # tcp or udp; default tcp
//! type = "load-balancer"              # cluster-ip, node-port, load-balancer, external-ip
//!
//! [[service.backend]]
//! address = "10.1.0.11:8080"
//! weight = 1                          # optional, 0-65535, default 1
//! state = "active"                    # optional: active, terminating, quarantined, maintenance
//! node = "node-1"                     # optional
//! zone = "zone-a"                     # optional
//! ```
//!
//! The file is walked as a TOML table rather than deserialised, so that
//! every error is one line naming the file, the service (index and name)
//! and the field. Unknown keys are errors, except `node`, `[[interface]]`
//! and `[conntrack]`, which belong to lbd and are ignored here. Every
//! object also passes the model's `validate()`, and an object defined
//! twice is an error.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use lb_dataplane::flow::SnatPorts;
use toml::{Table, Value};

use crate::model::{
    Backend, BackendKey, BackendState, Change, Cidr, Frontend, FrontendKey, FrontendType, Mode, Protocol,
    Service, Source, TrafficPolicy, MAX_WEIGHT,
};

/// A parsed, validated services file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServicesFile {
    /// `[snat] addresses`: this node's full-NAT source addresses.
    pub snat: Vec<IpAddr>,
    /// The services, in file order.
    pub services: Vec<Service>,
    /// Their frontends, in file order.
    pub frontends: Vec<Frontend>,
    /// Their backends, in file order.
    pub backends: Vec<Backend>,
}

/// Why a services file was rejected. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum ServicesFileError {
    /// The file could not be read.
    #[error("{}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error (in the message, so not a `source` too: a
        /// caller printing the chain would repeat it).
        error: std::io::Error,
    },
    /// The file is not TOML.
    #[error("{}: line {line}: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error (0 if unknown).
        line: usize,
        /// The parser's message, on one line.
        message: String,
    },
    /// A key or value is wrong.
    #[error("{}: {location}{field}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Where: e.g. `service[2] "default/web": frontend[0]: `, or empty.
        location: String,
        /// The key, e.g. `address`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl ServicesFile {
    /// Reads and parses `path`; objects get `source`.
    pub fn load(path: &Path, source: Source) -> Result<ServicesFile, ServicesFileError> {
        let text = std::fs::read_to_string(path).map_err(|error| ServicesFileError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        ServicesFile::parse(&text, path, source)
    }

    /// Parses `text`; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path, source: Source) -> Result<ServicesFile, ServicesFileError> {
        let table: Table = text.parse().map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
                .unwrap_or(0);
            ServicesFileError::Syntax {
                path: path.to_path_buf(),
                line,
                message: one_line(e.message()),
            }
        })?;
        Parser {
            path,
            source,
            out: ServicesFile::default(),
            frontend_at: Vec::new(),
            backend_at: Vec::new(),
        }
        .file(&table)
    }

    /// Upserts of every service, then every frontend, then every backend.
    pub fn to_changes(&self) -> Vec<Change> {
        let mut v = Vec::with_capacity(self.services.len() + self.frontends.len() + self.backends.len());
        v.extend(self.services.iter().cloned().map(Change::UpsertService));
        v.extend(self.frontends.iter().cloned().map(Change::UpsertFrontend));
        v.extend(self.backends.iter().cloned().map(Change::UpsertBackend));
        v
    }
}

/// A key of the file as an error names it: bare when TOML would write it
/// bare (`colour`), otherwise quoted and escaped like values
/// (`"a\nb\u{1b}"`), so that no key can break the message's one line or
/// send control sequences to a terminal.
fn key_name(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        k.to_string()
    } else {
        format!("{k:?}")
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Parses a duration such as `30s`, `10m`, `3h`, `1d`, `1h30m` or a plain
/// number of seconds, into seconds.
pub fn parse_duration(s: &str) -> Result<u32, String> {
    let err = || format!("{s:?} is not a duration (write e.g. 30s, 10m, 3h, 1h30m)");
    // No trimming and no signs: `u32::from_str` alone would take "+5".
    let t = s;
    if t.is_empty() {
        return Err(err());
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<u32>().map_err(|_| err());
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    // Each unit at most once, largest first: "30m1h" and "1m1m" are typos.
    let mut last_unit = u64::MAX;
    for c in t.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(err()),
        };
        if unit >= last_unit {
            return Err(format!(
                "{s:?}: each of d, h, m and s at most once, in that order"
            ));
        }
        last_unit = unit;
        let n: u64 = digits.parse().map_err(|_| err())?;
        digits.clear();
        total = n
            .checked_mul(unit)
            .and_then(|x| total.checked_add(x))
            .filter(|&x| x <= u64::from(u32::MAX))
            .ok_or_else(|| format!("{s:?} is too long"))?;
    }
    if !digits.is_empty() {
        return Err(err());
    }
    u32::try_from(total).map_err(|_| format!("{s:?} is too long"))
}

/// Formats seconds as the shortest `1h30m`-style duration.
pub fn format_duration(mut secs: u32) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, name) in [(86_400, 'd'), (3600, 'h'), (60, 'm'), (1, 's')] {
        if secs >= unit {
            let _ = write!(out, "{}{name}", secs / unit);
            secs %= unit;
        }
    }
    out
}

struct Parser<'a> {
    path: &'a Path,
    source: Source,
    out: ServicesFile,
    /// Where each of `out.frontends` and `out.backends` is written
    /// (`service[2] "default/web": frontend[0]: `), for errors found
    /// after the parse.
    frontend_at: Vec<String>,
    backend_at: Vec<String>,
}

type R<T> = Result<T, ServicesFileError>;

impl Parser<'_> {
    fn err(&self, location: &str, field: &str, message: impl Into<String>) -> ServicesFileError {
        // An error about the item itself (no field): the item is the field,
        // so the message does not read `frontend[0]: : must be a table`.
        let (location, field) = match (field, location.strip_suffix(": ")) {
            ("", Some(item)) => ("", item),
            _ => (location, field),
        };
        ServicesFileError::Invalid {
            path: self.path.to_path_buf(),
            location: location.to_string(),
            field: field.to_string(),
            message: message.into(),
        }
    }

    fn file(mut self, t: &Table) -> R<ServicesFile> {
        for (k, v) in t {
            match k.as_str() {
                "snat" => self.snat(v)?,
                "service" => {
                    let Value::Array(items) = v else {
                        return Err(self.err("", "service", "must be an array of tables ([[service]])"));
                    };
                    for (i, item) in items.iter().enumerate() {
                        self.service(i, item)?;
                    }
                }
                // lbd's own settings (node name, per-port addresses,
                // conntrack timeouts), parsed by lbd.
                "interface" | "node" | "conntrack" => {}
                other => {
                    return Err(self.err(
                        "",
                        &key_name(other),
                        "unknown key (expected snat, service, node, interface or conntrack)",
                    ))
                }
            }
        }
        self.check_duplicates()?;
        Ok(self.out)
    }

    fn snat(&mut self, v: &Value) -> R<()> {
        let loc = "snat: ";
        let Value::Table(t) = v else {
            return Err(self.err("", "snat", "must be a table ([snat])"));
        };
        for (k, v) in t {
            if k != "addresses" {
                return Err(self.err(loc, &key_name(k), "unknown key (expected addresses)"));
            }
            for (i, s) in self.strings(loc, "addresses", v)?.iter().enumerate() {
                let field = format!("addresses[{i}]");
                let a: IpAddr = s
                    .parse()
                    .map_err(|_| self.err(loc, &field, format!("{s:?} is not an IP address")))?;
                // What the snapshot builder and the workers' port pools
                // would refuse later, refused here where the field can be
                // named.
                if !lb_dataplane::snapshot::is_unicast(a) {
                    return Err(self.err(loc, &field, format!("{a} is unspecified, multicast or broadcast")));
                }
                // As for frontends and backends: a loopback source address
                // reaches no backend, and an IPv4-mapped one would pool an
                // IPv4 address as IPv6.
                crate::model::check_unicast(a).map_err(|m| self.err(loc, &field, m))?;
                if self.out.snat.contains(&a) {
                    return Err(self.err(loc, &field, format!("{a} is listed twice")));
                }
                if self.out.snat.len() == SnatPorts::MAX_ADDRESSES {
                    return Err(self.err(
                        loc,
                        &field,
                        format!(
                            "more than {} addresses (IPv4 and IPv6 together)",
                            SnatPorts::MAX_ADDRESSES
                        ),
                    ));
                }
                self.out.snat.push(a);
            }
        }
        Ok(())
    }

    fn strings(&self, loc: &str, field: &str, v: &Value) -> R<Vec<String>> {
        let Value::Array(items) = v else {
            return Err(self.err(loc, field, "must be an array of strings"));
        };
        items
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| self.err(loc, field, "must be an array of strings"))
            })
            .collect()
    }

    fn string<'v>(&self, loc: &str, field: &str, v: &'v Value) -> R<&'v str> {
        v.as_str()
            .ok_or_else(|| self.err(loc, field, format!("must be a string, not {}", v.type_str())))
    }

    fn keyword<T: Copy>(&self, loc: &str, field: &str, v: &Value, options: &[(&str, T)]) -> R<T> {
        let s = self.string(loc, field, v)?;
        options
            .iter()
            .find(|(name, _)| *name == s)
            .map(|&(_, t)| t)
            .ok_or_else(|| {
                let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
                self.err(loc, field, format!("{s:?} is not one of {}", names.join(", ")))
            })
    }

    fn endpoint(&self, loc: &str, field: &str, v: &Value) -> R<SocketAddr> {
        let s = self.string(loc, field, v)?;
        let a: SocketAddr = crate::model::parse_socket_addr(s).ok_or_else(|| {
            self.err(
                loc,
                field,
                format!("{s:?} is not an address:port (write 10.0.0.1:80 or [fd00::1]:80)"),
            )
        })?;
        if a.port() == 0 {
            return Err(self.err(loc, field, format!("{s:?}: port must be 1-65535")));
        }
        Ok(a)
    }

    fn service(&mut self, i: usize, v: &Value) -> R<()> {
        let Value::Table(t) = v else {
            return Err(self.err(&format!("service[{i}]: "), "", "must be a table"));
        };
        // The name first, so that every later error can carry it.
        let name = match t.get("name") {
            Some(n) => self.string(&format!("service[{i}]: "), "name", n)?.to_string(),
            None => return Err(self.err(&format!("service[{i}]: "), "name", "is required")),
        };
        let loc = format!("service[{i}] {name:?}: ");
        let mut svc = Service {
            name: name.clone(),
            mode: Mode::FullNat,
            traffic_policy: TrafficPolicy::Cluster,
            affinity_timeout_seconds: None,
            source_ranges: Vec::new(),
            source: self.source,
        };
        let mut frontends = None;
        let mut backends = None;
        for (k, v) in t {
            match k.as_str() {
                "name" => {}
                "mode" => {
                    svc.mode =
                        self.keyword(&loc, k, v, &[("fullnat", Mode::FullNat), ("dnat", Mode::Dnat)])?
                }
                "traffic_policy" => {
                    svc.traffic_policy = self.keyword(
                        &loc,
                        k,
                        v,
                        &[("cluster", TrafficPolicy::Cluster), ("local", TrafficPolicy::Local)],
                    )?
                }
                "session_affinity_timeout" => {
                    let secs = match v {
                        Value::String(s) => parse_duration(s).map_err(|m| self.err(&loc, k, m))?,
                        Value::Integer(n) => u32::try_from(*n)
                            .map_err(|_| self.err(&loc, k, format!("{n} is not a number of seconds")))?,
                        _ => return Err(self.err(&loc, k, "must be a duration such as \"3h\"")),
                    };
                    svc.affinity_timeout_seconds = Some(secs);
                }
                "source_ranges" => {
                    for (j, s) in self.strings(&loc, k, v)?.iter().enumerate() {
                        let c: Cidr = s
                            .parse()
                            .map_err(|m: String| self.err(&loc, &format!("source_ranges[{j}]"), m))?;
                        svc.source_ranges.push(c);
                    }
                }
                "frontend" => frontends = Some(v),
                "backend" => backends = Some(v),
                other => {
                    return Err(self.err(
                        &loc,
                        &key_name(other),
                        "unknown key (expected name, mode, traffic_policy, session_affinity_timeout, source_ranges, frontend, backend)",
                    ))
                }
            }
        }
        svc.validate().map_err(|e| {
            // The model names the proto's field; this file's key differs.
            let key = match e.field.as_str() {
                crate::model::AFFINITY_FIELD => "session_affinity_timeout",
                f => f,
            };
            self.err(&loc, key, e.message)
        })?;
        self.out.services.push(svc);
        if let Some(v) = frontends {
            let Value::Array(items) = v else {
                return Err(self.err(
                    &loc,
                    "frontend",
                    "must be an array of tables ([[service.frontend]])",
                ));
            };
            for (j, item) in items.iter().enumerate() {
                let at = format!("{loc}frontend[{j}]: ");
                let f = self.frontend(&at, &name, item)?;
                self.out.frontends.push(f);
                self.frontend_at.push(at);
            }
        }
        if let Some(v) = backends {
            let Value::Array(items) = v else {
                return Err(self.err(
                    &loc,
                    "backend",
                    "must be an array of tables ([[service.backend]])",
                ));
            };
            for (j, item) in items.iter().enumerate() {
                let at = format!("{loc}backend[{j}]: ");
                let b = self.backend(&at, &name, item)?;
                self.out.backends.push(b);
                self.backend_at.push(at);
            }
        }
        Ok(())
    }

    fn frontend(&self, loc: &str, service: &str, v: &Value) -> R<Frontend> {
        let Value::Table(t) = v else {
            return Err(self.err(loc, "", "must be a table"));
        };
        let mut addr = None;
        let mut protocol = Protocol::Tcp;
        let mut kind = FrontendType::LoadBalancer;
        for (k, v) in t {
            match k.as_str() {
                "address" => addr = Some(self.endpoint(loc, k, v)?),
                "protocol" => {
                    protocol = self.keyword(loc, k, v, &[("tcp", Protocol::Tcp), ("udp", Protocol::Udp)])?
                }
                "type" => {
                    kind = self.keyword(
                        loc,
                        k,
                        v,
                        &[
                            ("cluster-ip", FrontendType::ClusterIp),
                            ("node-port", FrontendType::NodePort),
                            ("load-balancer", FrontendType::LoadBalancer),
                            ("external-ip", FrontendType::ExternalIp),
                        ],
                    )?
                }
                other => {
                    return Err(self.err(
                        loc,
                        &key_name(other),
                        "unknown key (expected address, protocol, type)",
                    ))
                }
            }
        }
        let addr = addr.ok_or_else(|| self.err(loc, "address", "is required"))?;
        let f = Frontend {
            service: service.to_string(),
            key: FrontendKey {
                addr: addr.ip(),
                port: addr.port(),
                protocol,
            },
            kind,
            source: self.source,
        };
        f.validate().map_err(|e| self.err(loc, &e.field, e.message))?;
        Ok(f)
    }

    fn backend(&self, loc: &str, service: &str, v: &Value) -> R<Backend> {
        let Value::Table(t) = v else {
            return Err(self.err(loc, "", "must be a table"));
        };
        let mut addr = None;
        let mut weight = 1;
        let mut state = BackendState::Active;
        let mut node = None;
        let mut zone = None;
        for (k, v) in t {
            match k.as_str() {
                "address" => addr = Some(self.endpoint(loc, k, v)?),
                "weight" => {
                    weight = v
                        .as_integer()
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|&n| n <= MAX_WEIGHT)
                        .ok_or_else(|| {
                            self.err(loc, k, format!("must be an integer from 0 to {MAX_WEIGHT}"))
                        })?
                }
                "state" => {
                    state = self.keyword(
                        loc,
                        k,
                        v,
                        &[
                            ("active", BackendState::Active),
                            ("terminating", BackendState::Terminating),
                            ("quarantined", BackendState::Quarantined),
                            ("maintenance", BackendState::Maintenance),
                        ],
                    )?
                }
                "node" => node = Some(self.string(loc, k, v)?.to_string()),
                "zone" => zone = Some(self.string(loc, k, v)?.to_string()),
                other => {
                    return Err(self.err(
                        loc,
                        &key_name(other),
                        "unknown key (expected address, weight, state, node, zone)",
                    ))
                }
            }
        }
        let addr = addr.ok_or_else(|| self.err(loc, "address", "is required"))?;
        let b = Backend {
            key: BackendKey {
                service: service.to_string(),
                addr: addr.ip(),
                port: addr.port(),
            },
            weight,
            state,
            operator_state: None,
            node,
            zone,
            source: self.source,
        };
        b.validate().map_err(|e| self.err(loc, &e.field, e.message))?;
        Ok(b)
    }

    fn check_duplicates(&self) -> R<()> {
        let mut names = BTreeSet::new();
        for (i, s) in self.out.services.iter().enumerate() {
            if !names.insert(&s.name) {
                return Err(self.err(
                    &format!("service[{i}] {:?}: ", s.name),
                    "name",
                    "a service of this name is defined earlier in the file",
                ));
            }
        }
        // The second definition is named, with the first's place.
        let mut keys = BTreeMap::new();
        for (f, at) in self.out.frontends.iter().zip(&self.frontend_at) {
            if let Some(first) = keys.insert(f.key, at) {
                return Err(self.err(
                    at,
                    "address",
                    format!(
                        "{} is defined more than once in the file (first at {})",
                        f.key,
                        first.trim_end_matches(": ")
                    ),
                ));
            }
        }
        let mut keys = BTreeMap::new();
        for (b, at) in self.out.backends.iter().zip(&self.backend_at) {
            if let Some(first) = keys.insert(&b.key, at) {
                return Err(self.err(
                    at,
                    "address",
                    format!(
                        "{} is defined more than once in the file (first at {})",
                        b.key,
                        first.trim_end_matches(": ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[snat]
addresses = ["10.1.0.1", "fd01::1"]

[[interface]]
port = 0
address = "10.0.0.1/24"
whatever = true

[[service]]
name = "default/web"
mode = "fullnat"
traffic_policy = "cluster"
session_affinity_timeout = "3h"
source_ranges = ["0.0.0.0/0"]

[[service.frontend]]
address = "10.0.0.100:80"
protocol = "tcp"
type = "load-balancer"

[[service.frontend]]
address = "[fd00::100]:80"

[[service.backend]]
address = "10.1.0.11:8080"
weight = 1
state = "active"
node = "node-1"

[[service.backend]]
address = "10.1.0.12:8080"
weight = 3
state = "maintenance"
zone = "b"

[[service]]
name = "kube-system/dns"
mode = "dnat"
traffic_policy = "local"

[[service.frontend]]
address = "10.0.0.53:53"
protocol = "udp"
type = "cluster-ip"
"#;

    fn parse(text: &str) -> Result<ServicesFile, ServicesFileError> {
        ServicesFile::parse(text, Path::new("svc.toml"), Source::Config)
    }

    fn error(text: &str) -> String {
        let e = parse(text).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        e
    }

    #[test]
    fn a_valid_file() {
        let f = parse(GOOD).unwrap();
        assert_eq!(
            f.snat,
            vec!["10.1.0.1".parse::<IpAddr>().unwrap(), "fd01::1".parse().unwrap()]
        );
        assert_eq!(f.services.len(), 2);
        let web = &f.services[0];
        assert_eq!(web.name, "default/web");
        assert_eq!(web.mode, Mode::FullNat);
        assert_eq!(web.affinity_timeout_seconds, Some(3 * 3600));
        assert_eq!(web.source_ranges, vec!["0.0.0.0/0".parse().unwrap()]);
        assert_eq!(web.source, Source::Config);
        let dns = &f.services[1];
        assert_eq!((dns.mode, dns.traffic_policy), (Mode::Dnat, TrafficPolicy::Local));
        assert_eq!(f.frontends.len(), 3);
        assert_eq!(f.frontends[1].key.to_string(), "[fd00::100]:80/tcp");
        assert_eq!(f.frontends[1].kind, FrontendType::LoadBalancer);
        assert_eq!(f.frontends[2].key.protocol, Protocol::Udp);
        assert_eq!(f.frontends[2].kind, FrontendType::ClusterIp);
        assert_eq!(f.frontends[2].service, "kube-system/dns");
        assert_eq!(f.backends.len(), 2);
        assert_eq!(f.backends[0].node.as_deref(), Some("node-1"));
        assert_eq!(f.backends[1].weight, 3);
        assert_eq!(f.backends[1].state, BackendState::Maintenance);
        assert_eq!(f.backends[1].zone.as_deref(), Some("b"));
        let changes = f.to_changes();
        assert_eq!(changes.len(), 7);
        assert!(matches!(changes[0], Change::UpsertService(_)));
        assert!(matches!(changes[2], Change::UpsertFrontend(_)));
        assert!(matches!(changes[6], Change::UpsertBackend(_)));
    }

    #[test]
    fn empty_file_and_interfaces_only() {
        assert_eq!(parse("").unwrap(), ServicesFile::default());
        assert_eq!(
            parse("[[interface]]\nname = \"p0\"\n[[interface]]\nx = 1\n").unwrap(),
            ServicesFile::default()
        );
        // lbd's `[conntrack]` is lbd's to check, so that `lbctl apply -f`
        // takes lbd's config file.
        assert_eq!(
            parse("node = \"n\"\n[conntrack.timeouts]\ntcp_established = \"1h\"\n").unwrap(),
            ServicesFile::default()
        );
    }

    #[test]
    fn each_error_names_file_service_and_field() {
        let svc = "[[service]]\nname = \"default/web\"\n";
        let cases: Vec<(String, &str)> = vec![
            ("bogus = 1\n".into(), "svc.toml: bogus: unknown key"),
            ("[snat]\naddrs = []\n".into(), "svc.toml: snat: addrs: unknown key"),
            ("service = [1]\n".into(), "svc.toml: service[0]: must be a table"),
            (
                format!("{svc}frontend = [\"x\"]\n"),
                "svc.toml: service[0] \"default/web\": frontend[0]: must be a table",
            ),
            ("[snat]\naddresses = [\"x\"]\n".into(), "svc.toml: snat: addresses[0]: \"x\" is not an IP address"),
            (
                "[snat]\naddresses = [\"10.9.0.1\", \"224.0.0.1\"]\n".into(),
                "svc.toml: snat: addresses[1]: 224.0.0.1 is unspecified, multicast or broadcast",
            ),
            (
                "[snat]\naddresses = [\"::\"]\n".into(),
                "svc.toml: snat: addresses[0]: :: is unspecified, multicast or broadcast",
            ),
            (
                "[snat]\naddresses = [\"10.9.0.1\", \"127.0.0.1\"]\n".into(),
                "svc.toml: snat: addresses[1]: 127.0.0.1 is a loopback address",
            ),
            (
                "[snat]\naddresses = [\"::1\"]\n".into(),
                "svc.toml: snat: addresses[0]: ::1 is a loopback address",
            ),
            (
                "[snat]\naddresses = [\"::ffff:10.9.0.1\"]\n".into(),
                "svc.toml: snat: addresses[0]: ::ffff:10.9.0.1 is an IPv4-mapped address: write 10.9.0.1",
            ),
            (
                "[snat]\naddresses = [\"10.9.0.1\", \"fd00::1\", \"10.9.0.1\"]\n".into(),
                "svc.toml: snat: addresses[2]: 10.9.0.1 is listed twice",
            ),
            (
                // 64 in all, not per family: the workers' port pools number
                // both families' addresses in one list.
                format!(
                    "[snat]\naddresses = [{}, \"fd00::1\"]\n",
                    (0..64).map(|i| format!("\"10.9.0.{i}\"")).collect::<Vec<_>>().join(", ")
                ),
                "svc.toml: snat: addresses[64]: more than 64 addresses (IPv4 and IPv6 together)",
            ),
            ("[[service]]\nmode = \"dnat\"\n".into(), "svc.toml: service[0]: name: is required"),
            ("[[service]]\nname = \"web\"\n".into(), "svc.toml: service[0] \"web\": name: \"web\" is not of the form namespace/name"),
            (format!("{svc}colour = 1\n"), "svc.toml: service[0] \"default/web\": colour: unknown key"),
            (format!("{svc}mode = \"nat\"\n"), "svc.toml: service[0] \"default/web\": mode: \"nat\" is not one of fullnat, dnat"),
            (format!("{svc}traffic_policy = 1\n"), "traffic_policy: must be a string, not integer"),
            (format!("{svc}session_affinity_timeout = \"3x\"\n"), "session_affinity_timeout: \"3x\" is not a duration"),
            (format!("{svc}session_affinity_timeout = \"2d\"\n"), "\"default/web\": session_affinity_timeout: 172800 s is not within"),
            (format!("{svc}session_affinity_timeout = 0\n"), "\"default/web\": session_affinity_timeout: 0 s is not within"),
            (format!("{svc}source_ranges = [\"10.0.0.0/8\", \"10.0.0.0\"]\n"), "source_ranges[1]: \"10.0.0.0\" has no prefix length (write e.g. 10.0.0.0/24)"),
            (format!("{svc}[[service.frontend]]\naddress = \"10.0.0.1\"\n"), "service[0] \"default/web\": frontend[0]: address: \"10.0.0.1\" is not an address:port"),
            (format!("{svc}[[service.frontend]]\nprotocol = \"tcp\"\n"), "frontend[0]: address: is required"),
            (format!("{svc}[[service.frontend]]\naddress = \"10.0.0.1:0\"\n"), "frontend[0]: address: \"10.0.0.1:0\": port must be 1-65535"),
            (format!("{svc}[[service.frontend]]\naddress = \"10.0.0.1:80\"\nprotocol = \"sctp\"\n"), "frontend[0]: protocol: \"sctp\" is not one of tcp, udp"),
            (format!("{svc}[[service.frontend]]\naddress = \"10.0.0.1:80\"\ntype = \"nodeport\"\n"), "frontend[0]: type: \"nodeport\" is not one of"),
            (format!("{svc}[[service.frontend]]\naddress = \"224.0.0.1:80\"\n"), "frontend[0]: address: 224.0.0.1 is not a unicast address"),
            (format!("{svc}[[service.frontend]]\naddress = \"10.0.0.1:80\"\nport = 80\n"), "frontend[0]: port: unknown key"),
            (format!("{svc}[[service.backend]]\naddress = \"10.1.0.1:80\"\nweight = 70000\n"), "service[0] \"default/web\": backend[0]: weight: must be an integer from 0 to 65535"),
            (format!("{svc}[[service.backend]]\naddress = \"10.1.0.1:80\"\nweight = -1\n"), "backend[0]: weight"),
            (format!("{svc}[[service.backend]]\naddress = \"10.1.0.1:80\"\nstate = \"draining\"\n"), "backend[0]: state: \"draining\" is not one of"),
            (format!("{svc}[[service.backend]]\naddress = \"10.1.0.1:80\"\nnode = \"\"\n"), "backend[0]: node: \"\" must be 1-253 bytes"),
            (format!("{svc}[[service.backend]]\naddress = \"10.1.0.1:80\"\n[[service.backend]]\naddress = \"10.1.0.1:80\"\n"), "service[0] \"default/web\": backend[1]: address: 10.1.0.1:80 of default/web is defined more than once in the file (first at service[0] \"default/web\": backend[0])"),
            (format!("{svc}{svc}"), "service[1] \"default/web\": name: a service of this name is defined earlier"),
            ("[[service]]\nname = \"a/b\"\n[[service.frontend]]\naddress = \"10.0.0.1:80\"\n[[service]]\nname = \"a/c\"\n[[service.frontend]]\naddress = \"10.0.0.1:80\"\n".into(), "service[1] \"a/c\": frontend[0]: address: 10.0.0.1:80/tcp is defined more than once in the file (first at service[0] \"a/b\": frontend[0])"),
            ("service = 1\n".into(), "svc.toml: service: must be an array of tables"),
        ];
        for (text, want) in cases {
            let e = error(&text);
            assert!(e.contains(want), "{text}\n  got:  {e}\n  want: {want}");
            assert!(e.starts_with("svc.toml: "), "{e}");
            assert!(!e.contains(": : "), "no empty field: {e}");
        }
    }

    /// An unknown key is named bare when TOML writes it bare, and quoted
    /// and escaped otherwise, at every level: a key with a newline or an
    /// escape sequence gives one line without control characters.
    #[test]
    fn unknown_keys_are_named_escaped() {
        let svc = "[[service]]\nname = \"default/web\"\n";
        let key = r#""a\nb\u001b[31mc" = 1"#;
        let shown = r#""a\nb\u{1b}[31mc": unknown key"#;
        for (text, want) in [
            (format!("{key}\n"), format!("svc.toml: {shown}")),
            (format!("[snat]\n{key}\n"), format!("svc.toml: snat: {shown}")),
            (
                format!("{svc}{key}\n"),
                format!("svc.toml: service[0] \"default/web\": {shown}"),
            ),
            (
                format!("{svc}[[service.frontend]]\n{key}\n"),
                format!("svc.toml: service[0] \"default/web\": frontend[0]: {shown}"),
            ),
            (
                format!("{svc}[[service.backend]]\n{key}\n"),
                format!("svc.toml: service[0] \"default/web\": backend[0]: {shown}"),
            ),
            // Quoted but bare-able: named bare. Not bare-able: quoted.
            (
                format!("{svc}\"colour\" = 1\n"),
                "\"default/web\": colour: unknown key".into(),
            ),
            (
                format!("{svc}\"col our\" = 1\n"),
                "\"default/web\": \"col our\": unknown key".into(),
            ),
            (
                format!("{svc}\"\" = 1\n"),
                "\"default/web\": \"\": unknown key".into(),
            ),
        ] {
            let e = error(&text);
            assert!(!e.chars().any(char::is_control), "{e:?}");
            assert!(e.contains(&want), "{text}\n  got:  {e}\n  want: {want}");
        }
    }

    #[test]
    fn syntax_errors_are_one_line_with_the_line_number() {
        let e = error("[[service]]\nname = \"a/b\"\nmode = \n");
        assert!(e.starts_with("svc.toml: line 3: "), "{e}");
    }

    #[test]
    fn durations() {
        for (s, n) in [
            ("30s", 30),
            ("10m", 600),
            ("3h", 10_800),
            ("1d", 86_400),
            ("1h30m", 5400),
            ("1d2h3m4s", 93_784),
            ("90", 90),
            ("0s", 0),
        ] {
            assert_eq!(parse_duration(s), Ok(n), "{s}");
        }
        for s in [
            "",
            "h",
            "3x",
            "1h30",
            "-1s",
            "99999999999s",
            "1.5h",
            "+5",
            "+5s",
            " 30s ",
            "30 s",
            "1h 30m",
            "30m1h",
            "1m1m",
            "1s1d",
        ] {
            assert!(parse_duration(s).is_err(), "{s}");
        }
        assert_eq!(
            parse_duration("30m1h30m").unwrap_err(),
            "\"30m1h30m\": each of d, h, m and s at most once, in that order"
        );
        assert_eq!(format_duration(5400), "1h30m");
        assert_eq!(format_duration(10_800), "3h");
        assert_eq!(format_duration(61), "1m1s");
        let f = parse("[[service]]\nname = \"a/b\"\nsession_affinity_timeout = 600\n").unwrap();
        assert_eq!(f.services[0].affinity_timeout_seconds, Some(600));
    }

    /// Edits of the valid file: at a character position, delete some
    /// characters, or insert a piece of TOML syntax, a digit run, or a
    /// multi-byte character (a span inside one must not be sliced).
    fn mutated() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop::sample::select(vec![
            "\"",
            "[",
            "]]",
            "=",
            "\n",
            ",",
            "é",
            "\u{1F600}",
            "-1",
            "99999999999",
            ":",
            "\\",
            "#",
            "{}",
            "[[service]]\nname = \"a/b\"\n",
        ]);
        let edit = (any::<prop::sample::Index>(), 0usize..4, prop::option::of(piece));
        prop::collection::vec(edit, 1..4).prop_map(|edits| {
            let mut t: Vec<char> = GOOD.chars().collect();
            for (at, del, ins) in edits {
                let at = at.index(t.len() + 1);
                let end = (at + del).min(t.len());
                t.splice(at..end, ins.unwrap_or("").chars());
            }
            t.into_iter().collect()
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Whatever the edit: no panic, and an error is one line that
        /// starts with the file's name.
        #[test]
        fn edited_files_parse_or_fail_in_one_line(text in mutated()) {
            if let Err(e) = parse(&text) {
                let e = e.to_string();
                proptest::prop_assert!(!e.contains('\n') && e.starts_with("svc.toml: "), "{e}");
            }
        }
    }

    #[test]
    fn load_names_a_missing_file() {
        let e = ServicesFile::load(Path::new("/nonexistent/svc.toml"), Source::Api).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/svc.toml: "), "{e}");
    }
}
