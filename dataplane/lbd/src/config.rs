//! The configuration file (TOML).
//!
//! `node`: this node's name, which services with `traffic_policy =
//! "local"` match against their backends' `node` (optional; `--node-name`
//! overrides it). `[[interface]]`: one table per DPDK port, in port order,
//! each with the port's address and prefix (or a list of them, e.g. one
//! IPv4 and one IPv6), an optional gateway (or one per family) and an
//! optional 802.1Q `vlan` id (on every interface or on none) and an
//! optional `mtu` (68-9216, at least 1280 with an IPv6 address; the
//! device's own, 1500 on nearly every NIC, when not given). `[snat]` and
//! `[[service]]` are the services file of `lbctl apply -f` (parsed by
//! `lb_control::services_file`): the node's full-NAT source addresses and
//! the services of the `config` source, resynced at every start.
//! `[conntrack.timeouts]`: the connection tables' idle timeouts
//! ([`timeouts`]). Unknown keys are errors, so a typo cannot silently
//! change behaviour.
//!
//! ```toml
//! node = "gw-1"              # optional
//!
//! [[interface]]
//! address = "10.0.0.1/24"
//! gateway = "10.0.0.254"     # optional
//! vlan = 100                 # optional: the port is on a trunk
//! mtu = 9000                 # optional: the largest IP packet on the link
//!
//! [conntrack.timeouts]       # optional, each key too
//! tcp_established = "1h"     # or seconds: 3600
//!
//! [snat]
//! addresses = ["10.1.0.1"]
//!
//! [[service]]
//! name = "default/web"
//! # ... see the README's "Services file"
//! ```

pub mod timeouts;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use lb_control::model::Source;
use lb_control::services_file::{ServicesFile, ServicesFileError};
use lb_dataplane::conntrack::Timeouts;
use lb_dataplane::snapshot::{min_mtu, Cidr, MAX_MTU, MIN_MTU};
use serde::Deserialize;

use self::timeouts::RawConntrack;

/// Errors loading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML does not parse or does not match the schema.
    #[error("config {path}: {msg}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, flattened to one line.
        msg: String,
    },
    /// A top-level value is invalid.
    #[error("config {path}: {field}: {msg}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The key.
        field: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// The `[snat]` or `[[service]]` part is invalid.
    #[error("config {0}")]
    Services(#[from] ServicesFileError),
    /// A value is invalid.
    #[error("config {path}: interface {index}: {field}: {msg}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Interface number, from 0 (= DPDK port id).
        index: usize,
        /// The field.
        field: &'static str,
        /// What is wrong.
        msg: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    node: Option<String>,
    #[serde(default)]
    interface: Vec<RawInterface>,
    #[serde(default)]
    conntrack: RawConntrack,
    // Checked by `ServicesFile::parse`.
    snat: Option<toml::Value>,
    service: Option<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInterface {
    address: OneOrMany,
    gateway: Option<OneOrMany>,
    vlan: Option<i64>,
    mtu: Option<i64>,
}

/// `"x"` or `["x", "y"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// One DPDK port's layer-3 settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// The port's own addresses and subnets (at least one).
    pub addresses: Vec<Cidr>,
    /// Next hops for destinations outside the subnets: at most one per
    /// family, each inside one of `addresses`.
    pub gateways: Vec<IpAddr>,
    /// The 802.1Q VLAN id of the port's frames (1-4094), if tagged: set on
    /// every interface or on none.
    pub vlan: Option<u16>,
    /// The largest IP packet on the link, set on the device at start
    /// (68-9216, at least 1280 with an IPv6 address); `None` keeps the
    /// device's.
    pub mtu: Option<u16>,
}

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// This node's name, for services with the local traffic policy.
    pub node: Option<String>,
    /// Per port, in port order.
    pub interfaces: Vec<Interface>,
    /// `[snat]` and `[[service]]`: the `config` source.
    pub services: ServicesFile,
    /// `[conntrack.timeouts]`, defaults where a key is missing.
    pub conntrack_timeouts: Timeouts,
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses and validates TOML text; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            msg: e.to_string().split_whitespace().collect::<Vec<_>>().join(" "),
        })?;
        let invalid = |index, field, msg| ConfigError::Invalid {
            path: path.to_path_buf(),
            index,
            field,
            msg,
        };
        let mut interfaces = Vec::new();
        for (i, r) in raw.interface.into_iter().enumerate() {
            let mut addresses = Vec::new();
            for a in r.address.into_vec() {
                let c = Cidr::parse_prefixed(&a).map_err(|e| invalid(i, "address", e.to_string()))?;
                if !lb_dataplane::snapshot::is_unicast(c.addr()) {
                    return Err(invalid(
                        i,
                        "address",
                        format!("{} is unspecified, multicast or broadcast", c.addr()),
                    ));
                }
                // Every address lbd owns is one host's: the pipeline drops
                // packets to the others before it looks them up.
                if !lb_dataplane::snapshot::is_host_address(c.addr()) {
                    return Err(invalid(
                        i,
                        "address",
                        format!(
                            "{} is not one host's address (0/8, loopback or IPv4-mapped)",
                            c.addr()
                        ),
                    ));
                }
                if addresses.iter().any(|o: &Cidr| o.addr() == c.addr()) {
                    return Err(invalid(i, "address", format!("{} is listed twice", c.addr())));
                }
                // One address on two ports: both would answer ARP for it.
                if let Some(j) = interfaces
                    .iter()
                    .position(|o: &Interface| o.addresses.iter().any(|x| x.addr() == c.addr()))
                {
                    return Err(invalid(
                        i,
                        "address",
                        format!("{} is also interface {j}'s", c.addr()),
                    ));
                }
                addresses.push(c);
            }
            if addresses.is_empty() {
                return Err(invalid(i, "address", "the list is empty".into()));
            }
            let mut gateways: Vec<IpAddr> = Vec::new();
            for g in r.gateway.map(OneOrMany::into_vec).unwrap_or_default() {
                let gw: IpAddr = g
                    .parse()
                    .map_err(|_| invalid(i, "gateway", format!("{g:?} is not an IP address")))?;
                if gateways.iter().any(|o| o.is_ipv4() == gw.is_ipv4()) {
                    return Err(invalid(
                        i,
                        "gateway",
                        format!("{gw}: one gateway per address family"),
                    ));
                }
                let same_family: Vec<&Cidr> = addresses
                    .iter()
                    .filter(|c| c.addr().is_ipv4() == gw.is_ipv4())
                    .collect();
                if same_family.is_empty() {
                    let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
                    return Err(invalid(
                        i,
                        "gateway",
                        format!("{gw} is not of the address family of {}", list.join(", ")),
                    ));
                }
                if same_family.iter().any(|c| c.addr() == gw) {
                    // lbd would ask ARP for its own address and never hear.
                    return Err(invalid(
                        i,
                        "gateway",
                        format!("{gw} is the interface's own address"),
                    ));
                }
                if !same_family.iter().any(|c| c.contains(gw)) {
                    let list: Vec<String> = same_family.iter().map(|c| c.to_string()).collect();
                    return Err(invalid(
                        i,
                        "gateway",
                        format!("{gw} is not inside {}", list.join(", ")),
                    ));
                }
                gateways.push(gw);
            }
            let vlan = match r.vlan {
                None => None,
                Some(v @ 1..=4094) => Some(v as u16),
                Some(v) => return Err(invalid(i, "vlan", format!("{v} is not a VLAN id (1-4094)"))),
            };
            let min = min_mtu(addresses.iter().any(|c| c.addr().is_ipv6()));
            let mtu = match r.mtu {
                None => None,
                Some(m) if (i64::from(min)..=i64::from(MAX_MTU)).contains(&m) => Some(m as u16),
                Some(m) if (i64::from(MIN_MTU)..i64::from(min)).contains(&m) => {
                    return Err(invalid(
                        i,
                        "mtu",
                        format!(
                            "{m} is below IPv6's minimum MTU of 1280, and the interface has an IPv6 address"
                        ),
                    ))
                }
                Some(m) => {
                    return Err(invalid(
                        i,
                        "mtu",
                        format!("{m} is not an MTU lbd takes ({MIN_MTU}-{MAX_MTU})"),
                    ))
                }
            };
            interfaces.push(Interface {
                addresses,
                gateways,
                vlan,
                mtu,
            });
        }
        // Frames keep their tag from port to port (only the id changes), so
        // tagged and untagged ports cannot mix.
        if let Some(t) = interfaces.iter().position(|i| i.vlan.is_some()) {
            if let Some(u) = interfaces.iter().position(|i| i.vlan.is_none()) {
                return Err(invalid(
                    u,
                    "vlan",
                    format!("not set, but interface {t} has one: give every interface a vlan, or none"),
                ));
            }
        }
        let node = match raw.node {
            Some(n) => Some(check_node_name(&n).map_err(|msg| ConfigError::Field {
                path: path.to_path_buf(),
                field: "node",
                msg,
            })?),
            None => None,
        };
        let conntrack_timeouts = raw
            .conntrack
            .timeouts()
            .map_err(|(field, msg)| ConfigError::Field {
                path: path.to_path_buf(),
                field,
                msg,
            })?;
        let _ = (raw.snat, raw.service);
        let services = ServicesFile::parse(text, path, Source::Config)?;
        Ok(Config {
            node,
            interfaces,
            services,
            conntrack_timeouts,
        })
    }
}

/// A node name as backends carry it (`node`):
/// [`check_label`](lb_control::model::check_label)'s rule, since a
/// backend's `node` must equal it exactly.
pub fn check_node_name(name: &str) -> Result<String, String> {
    lb_control::model::check_label(name)?;
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, String> {
        Config::parse(s, Path::new("t.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn interfaces_parse() {
        let c = parse(
            "[[interface]]\naddress = \"10.0.0.1/24\"\ngateway = \"10.0.0.254\"\n\n[[interface]]\naddress = \"fd00::1/64\"\n",
        )
        .unwrap();
        assert_eq!(c.interfaces.len(), 2);
        assert_eq!(c.interfaces[0].addresses[0].to_string(), "10.0.0.1/24");
        assert_eq!(
            c.interfaces[0].gateways,
            vec!["10.0.0.254".parse::<IpAddr>().unwrap()]
        );
        assert!(c.interfaces[1].gateways.is_empty());
        // Dual stack: a list of addresses, a gateway per family.
        let c = parse(
            "[[interface]]\naddress = [\"10.0.0.1/24\", \"fd00::1/64\"]\ngateway = [\"fd00::fe\", \"10.0.0.254\"]\n",
        )
        .unwrap();
        let i = &c.interfaces[0];
        assert_eq!(
            (i.addresses.len(), i.addresses[1].to_string(), i.gateways.len()),
            (2, "fd00::1/64".to_string(), 2)
        );
        for (bad, what) in [
            ("address = []", "the list is empty"),
            ("address = [\"10.0.0.1/24\", \"10.0.0.1/16\"]", "listed twice"),
            (
                "address = \"10.0.0.1/24\"\ngateway = [\"10.0.0.2\", \"10.0.0.3\"]",
                "one gateway per address family",
            ),
            (
                "address = \"10.0.0.1/24\"\ngateway = \"fd00::fe\"",
                "not of the address family",
            ),
            (
                "address = [\"10.0.0.1/24\", \"fd00::1/64\"]\ngateway = \"fd01::fe\"",
                "not inside fd00::1/64",
            ),
            (
                "address = \"224.0.0.1/24\"",
                "224.0.0.1 is unspecified, multicast or broadcast",
            ),
            ("address = \"0.0.0.0/0\"", "unspecified, multicast or broadcast"),
            ("address = \"0.1.2.3/8\"", "0.1.2.3 is not one host's address"),
            ("address = \"127.0.0.2/8\"", "127.0.0.2 is not one host's address"),
            (
                "address = \"::ffff:10.0.0.1/120\"",
                "::ffff:10.0.0.1 is not one host's address",
            ),
            (
                "address = [\"10.0.0.1/24\", \"ff02::1/64\"]",
                "ff02::1 is unspecified",
            ),
            ("address = \"10.0.0.1/+8\"", "prefix length \"+8\""),
            (
                "address = [\"10.0.0.1/24\", \"fd00::1/64\"]\ngateway = \"fd00::1\"",
                "gateway: fd00::1 is the interface's own address",
            ),
        ] {
            let e = parse(&format!("[[interface]]\n{bad}\n")).unwrap_err();
            assert!(e.contains("interface 0") && e.contains(what), "{bad}: {e}");
        }
        let e = parse("[[interface]]\naddress = \"10.0.0.1/24\"\n[[interface]]\naddress = [\"fd00::1/64\", \"10.0.0.1/16\"]\n")
            .unwrap_err();
        assert!(
            e.contains("interface 1: address: 10.0.0.1 is also interface 0's"),
            "{e}"
        );
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn node_name() {
        let c = parse("node = \"gw-1\"\n").unwrap();
        assert_eq!(c.node.as_deref(), Some("gw-1"));
        assert_eq!(parse("").unwrap().node, None);
        for bad in ["\"\"", "\" gw-1\"", &format!("\"{}\"", "a".repeat(254))] {
            let e = parse(&format!("node = {bad}\n")).unwrap_err();
            assert!(e.starts_with("config t.toml: node: "), "{e}");
        }
        assert!(parse("node = 5\n").unwrap_err().contains("node"));
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse("[[interface]]\naddress = \"10.0.0.1\"\n").unwrap_err();
        assert!(
            e.contains("interface 0: address") && e.contains("no prefix length"),
            "{e}"
        );
        let e = parse("[[interface]]\naddress = \"10.0.0.1/33\"\n").unwrap_err();
        assert!(e.contains("prefix length"), "{e}");
        let e = parse("[[interface]]\naddress = \"10.0.0.1/24\"\ngateway = \"10.9.0.1\"\n").unwrap_err();
        assert!(
            e.contains("interface 0: gateway") && e.contains("not inside"),
            "{e}"
        );
        let e = parse("[[interface]]\naddress = \"10.0.0.1/24\"\ngatway = \"10.0.0.2\"\n").unwrap_err();
        assert!(e.contains("gatway"), "{e}");
        assert!(!e.contains('\n'));
        let e = parse("[[interface]]\naddress = 5\n").unwrap_err();
        assert!(e.starts_with("config t.toml:"), "{e}");
    }

    #[test]
    fn vlans_on_every_interface_or_none() {
        let two = |a: &str, b: &str| {
            parse(&format!(
                "[[interface]]\naddress = \"10.0.0.1/24\"\n{a}\n[[interface]]\naddress = \"10.1.0.1/24\"\n{b}\n"
            ))
        };
        let c = two("vlan = 100", "vlan = 4094").unwrap();
        assert_eq!(
            c.interfaces.iter().map(|i| i.vlan).collect::<Vec<_>>(),
            [Some(100), Some(4094)]
        );
        assert_eq!(two("", "").unwrap().interfaces[0].vlan, None);
        for (a, b, want) in [
            (
                "vlan = 0",
                "vlan = 2",
                "interface 0: vlan: 0 is not a VLAN id (1-4094)",
            ),
            (
                "vlan = 1",
                "vlan = 4095",
                "interface 1: vlan: 4095 is not a VLAN id (1-4094)",
            ),
            (
                "vlan = -3",
                "vlan = 2",
                "interface 0: vlan: -3 is not a VLAN id (1-4094)",
            ),
            (
                "",
                "vlan = 7",
                "interface 0: vlan: not set, but interface 1 has one: give every interface a vlan, or none",
            ),
        ] {
            let e = two(a, b).unwrap_err();
            assert!(e.ends_with(want), "{a} {b}: {e}");
        }
        assert!(two("vlan = \"100\"", "").unwrap_err().contains("vlan"));
    }

    #[test]
    fn mtus() {
        let one = |address: &str, mtu: &str| parse(&format!("[[interface]]\naddress = {address}\n{mtu}\n"));
        let v4 = "\"10.0.0.1/24\"";
        let both = "[\"10.0.0.1/24\", \"fd00::1/64\"]";
        assert_eq!(one(v4, "").unwrap().interfaces[0].mtu, None);
        for (address, mtu) in [(v4, 68), (v4, 9000), (v4, 9216), (both, 1280)] {
            let c = one(address, &format!("mtu = {mtu}")).unwrap();
            assert_eq!(c.interfaces[0].mtu, Some(mtu), "{address} {mtu}");
        }
        for (address, mtu, want) in [
            (v4, "67", "interface 0: mtu: 67 is not an MTU lbd takes (68-9216)"),
            (v4, "9217", "interface 0: mtu: 9217 is not an MTU lbd takes (68-9216)"),
            (v4, "-1500", "interface 0: mtu: -1500 is not an MTU lbd takes (68-9216)"),
            (
                both,
                "1279",
                "interface 0: mtu: 1279 is below IPv6's minimum MTU of 1280, and the interface has an IPv6 address",
            ),
        ] {
            let e = one(address, &format!("mtu = {mtu}")).unwrap_err();
            assert!(e.ends_with(want), "{mtu}: {e}");
        }
        assert!(one(v4, "mtu = \"9000\"").unwrap_err().contains("mtu"));
    }

    /// `[conntrack.timeouts]` reaches `Config`, and its errors are one
    /// line naming the file and the key (the keys themselves are tested
    /// in `timeouts`).
    #[test]
    fn conntrack_timeouts() {
        assert_eq!(parse("").unwrap().conntrack_timeouts, Timeouts::default());
        let t = parse(FULL).unwrap().conntrack_timeouts;
        assert_eq!((t.tcp_established.as_secs(), t.udp_replied.as_secs()), (3600, 60));
        assert_eq!(
            t.tcp_syn_sent,
            Timeouts::default().tcp_syn_sent,
            "a missing key keeps its default"
        );
        let e = parse("[conntrack.timeouts]\ntcp_established = 0\n").unwrap_err();
        assert_eq!(
            e,
            "config t.toml: conntrack.timeouts.tcp_established: 0 s is not within 1..=604800 s"
        );
        let e = parse("[conntrack.timeouts]\ntcp_establshed = 60\n").unwrap_err();
        assert!(
            e.starts_with("config t.toml: ") && e.contains("tcp_establshed") && !e.contains('\n'),
            "{e}"
        );
        let e = parse("[conntrack]\ntimeouts = 5\n").unwrap_err();
        assert!(e.starts_with("config t.toml: ") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn services_and_snat_are_the_config_source() {
        let c = parse(FULL).unwrap();
        assert_eq!(c.node.as_deref(), Some("gw-1"));
        assert_eq!(c.interfaces.len(), 2);
        assert_eq!(
            c.services.snat,
            ["10.1.0.1", "fd01::1"].map(|a| a.parse::<IpAddr>().unwrap())
        );
        assert_eq!(c.services.services.len(), 1);
        assert_eq!(c.services.services[0].source, Source::Config);
        assert_eq!(c.services.frontends.len(), 1);
        assert_eq!(c.services.backends.len(), 1);
        let e = parse("[[service]]\nname = \"x/y\"\nmode = \"nat\"\n").unwrap_err();
        assert!(e.starts_with("config t.toml:") && e.contains("mode"), "{e}");
        assert!(!e.contains('\n'));
    }

    /// A file with every part of the schema, for the edits below.
    const FULL: &str = r#"node = "gw-1"

[[interface]]
address = ["10.0.0.1/24", "fd00::1/64"]
gateway = ["10.0.0.254", "fd00::fe"]

[[interface]]
address = "192.168.7.1/24"

[conntrack.timeouts]
tcp_established = "1h"
udp_replied = 60

[snat]
addresses = ["10.1.0.1", "fd01::1"]

[[service]]
name = "default/web"
mode = "fullnat"
session_affinity_timeout = "3h"

[[service.frontend]]
address = "10.0.0.100:80"
protocol = "tcp"

[[service.backend]]
address = "10.1.0.11:8080"
weight = 2
"#;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Edits of a valid file (characters deleted, TOML syntax, digits
        /// or multi-byte characters inserted): no panic, and an error is
        /// one line naming the file, as `lbd` prints it before exiting.
        #[test]
        fn edited_configs_parse_or_fail_in_one_line(
            edits in proptest::collection::vec((
                proptest::prelude::any::<proptest::sample::Index>(),
                0usize..4,
                proptest::option::of(proptest::sample::select(vec![
                    "\"", "[", "]]", "=", "\n", ",", "é", "\u{1F600}", "-1", "99999999999",
                    ":", "/", "#", "{}", "::", "[[interface]]\n", "[conntrack.timeouts]\n",
                ])),
            ), 1..4)
        ) {
            let mut t: Vec<char> = FULL.chars().collect();
            for (at, del, ins) in edits {
                let at = at.index(t.len() + 1);
                let end = (at + del).min(t.len());
                t.splice(at..end, ins.unwrap_or("").chars());
            }
            let text: String = t.into_iter().collect();
            if let Err(e) = parse(&text) {
                proptest::prop_assert!(!e.contains('\n') && e.starts_with("config t.toml: "), "{e}");
            }
        }
    }
}
