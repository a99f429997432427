//! `[conntrack.timeouts]`: the connection tables' idle timeouts.
//!
//! One optional key per [`Timeouts`] field, a duration (`"15m"`, `"1h30m"`)
//! or integer seconds, as `session_affinity_timeout` is written. A missing
//! key keeps the library's default (IPVS-like, see [`Timeouts`]). Each
//! value is 1 s to [`MAX_SECS`]. Two more rules: `tcp_established_unreplied`
//! (a connection the backend has not answered) may not outlive
//! `tcp_established`, the one rule between keys, the one the state exists
//! for; when it is not given it is its default or `tcp_established`,
//! whichever is shorter, as Linux caps an unacknowledged connection's
//! timeout. And `udp_unreplied` is longer than [`UDP_STREAM_AFTER`]: an
//! answered UDP flow becomes a stream only by a packet that long after the
//! answer, within that timeout (which runs from the answer).

use std::collections::BTreeMap;
use std::time::Duration;

use lb_control::services_file::parse_duration;
use lb_dataplane::conntrack::{Timeouts, UDP_STREAM_AFTER};
use serde::Deserialize;
use toml::Value;

/// The longest timeout: a week. It covers nf_conntrack's 5-day established
/// default with room to spare; an entry idle longer than that is a leak
/// rather than a connection (and under full-NAT pins an SNAT port).
pub const MAX_SECS: u32 = 7 * 86_400;

/// `[conntrack]`: only `timeouts` so far (`--conntrack-size` is a flag).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConntrack {
    /// `[conntrack.timeouts]` as written; [`RawConntrack::timeouts`]
    /// checks the keys against [`KEYS`] and the values.
    #[serde(default)]
    timeouts: BTreeMap<String, Value>,
}

/// Where a key's value goes in [`Timeouts`].
type Slot = fn(&mut Timeouts) -> &mut Duration;

/// Every key, its name as errors give it, and its field; in
/// [`Timeouts`]' order, which the start-up log line keeps.
const KEYS: [(&str, Slot); 12] = [
    ("conntrack.timeouts.tcp_syn_sent", |t| &mut t.tcp_syn_sent),
    ("conntrack.timeouts.tcp_syn_recv", |t| &mut t.tcp_syn_recv),
    ("conntrack.timeouts.tcp_established", |t| &mut t.tcp_established),
    ("conntrack.timeouts.tcp_established_unreplied", |t| {
        &mut t.tcp_established_unreplied
    }),
    ("conntrack.timeouts.tcp_fin_wait", |t| &mut t.tcp_fin_wait),
    ("conntrack.timeouts.tcp_close_wait", |t| &mut t.tcp_close_wait),
    ("conntrack.timeouts.tcp_last_ack", |t| &mut t.tcp_last_ack),
    ("conntrack.timeouts.tcp_time_wait", |t| &mut t.tcp_time_wait),
    ("conntrack.timeouts.tcp_close", |t| &mut t.tcp_close),
    ("conntrack.timeouts.udp_unreplied", |t| &mut t.udp_unreplied),
    ("conntrack.timeouts.udp_replied", |t| &mut t.udp_replied),
    ("conntrack.timeouts.icmp", |t| &mut t.icmp),
];

const PREFIX: &str = "conntrack.timeouts.";

/// The keys the cross-key rules name.
const UNREPLIED: &str = "conntrack.timeouts.tcp_established_unreplied";
const UDP_UNREPLIED: &str = "conntrack.timeouts.udp_unreplied";

impl RawConntrack {
    /// The timeouts in force, or the key at fault and what is wrong.
    pub(super) fn timeouts(self) -> Result<Timeouts, (&'static str, String)> {
        let mut t = Timeouts::default();
        for (name, value) in &self.timeouts {
            let Some((key, slot)) = KEYS.iter().find(|(k, _)| k[PREFIX.len()..] == **name) else {
                let known: Vec<&str> = KEYS.iter().map(|(k, _)| &k[PREFIX.len()..]).collect();
                return Err((
                    "conntrack.timeouts",
                    format!("unknown key {name:?}; the keys are {}", known.join(", ")),
                ));
            };
            *slot(&mut t) = Duration::from_secs(seconds(value).map_err(|m| (*key, m))?.into());
        }
        if !self.timeouts.contains_key(&UNREPLIED[PREFIX.len()..]) {
            t.tcp_established_unreplied = t.tcp_established_unreplied.min(t.tcp_established);
        } else if t.tcp_established_unreplied > t.tcp_established {
            return Err((
                UNREPLIED,
                format!(
                    "{} s is longer than tcp_established ({} s): a connection the backend has not answered may not outlive one it has",
                    t.tcp_established_unreplied.as_secs(),
                    t.tcp_established.as_secs()
                ),
            ));
        }
        if t.udp_unreplied <= UDP_STREAM_AFTER {
            return Err((
                UDP_UNREPLIED,
                format!(
                    "{} s is too short: an answered UDP flow becomes a stream by a packet {} s after the answer, within this timeout; give at least {} s",
                    t.udp_unreplied.as_secs(),
                    UDP_STREAM_AFTER.as_secs(),
                    UDP_STREAM_AFTER.as_secs() + 1
                ),
            ));
        }
        Ok(t)
    }
}

/// One value in seconds, within `1..=MAX_SECS`.
fn seconds(v: &Value) -> Result<u32, String> {
    let secs: i64 = match v {
        Value::String(s) => parse_duration(s)?.into(),
        Value::Integer(n) => *n,
        _ => return Err("must be a duration such as \"15m\" or a whole number of seconds".into()),
    };
    u32::try_from(secs)
        .ok()
        .filter(|s| (1..=MAX_SECS).contains(s))
        .ok_or_else(|| format!("{secs} s is not within 1..={MAX_SECS} s"))
}

/// The timeouts that differ from the defaults, for the start-up log:
/// `tcp_established=3600s udp_replied=60s`, or `None` when all are default.
pub fn non_default(t: &Timeouts) -> Option<String> {
    let mut t = *t;
    let mut d = Timeouts::default();
    let changed: Vec<String> = KEYS
        .iter()
        .filter_map(|(key, slot)| {
            let (v, dv) = (*slot(&mut t), *slot(&mut d));
            (v != dv).then(|| format!("{}={}s", &key[PREFIX.len()..], v.as_secs()))
        })
        .collect();
    (!changed.is_empty()).then(|| changed.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<Timeouts, String> {
        #[derive(Deserialize)]
        struct File {
            conntrack: Option<RawConntrack>,
        }
        let f: File = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        f.conntrack
            .unwrap_or_default()
            .timeouts()
            .map_err(|(k, m)| format!("{k}: {m}"))
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn absent_is_default() {
        assert_eq!(parse("").unwrap(), Timeouts::default());
        assert_eq!(parse("[conntrack]\n").unwrap(), Timeouts::default());
        assert_eq!(parse("[conntrack.timeouts]\n").unwrap(), Timeouts::default());
        assert_eq!(non_default(&Timeouts::default()), None);
    }

    /// Every key sets its own field and nothing else.
    #[test]
    fn each_key_sets_its_field() {
        for (i, (key, slot)) in KEYS.iter().enumerate() {
            let name = &key[PREFIX.len()..];
            // Between the defaults of tcp_established_unreplied and
            // tcp_established, so that neither follows the other.
            let n = 301 + i as u64;
            let t = parse(&format!("[conntrack.timeouts]\n{name} = {n}\n")).unwrap();
            let mut want = Timeouts::default();
            *slot(&mut want) = secs(n);
            assert_eq!(t, want, "{name}");
            assert_eq!(non_default(&t), Some(format!("{name}={n}s")), "{name}");
        }
        // Every field has a key: setting them all leaves no default (UDP
        // states at the shortest udp_unreplied allowed).
        let all: String = KEYS
            .iter()
            .map(|(k, _)| {
                let name = &k[PREFIX.len()..];
                format!("{name} = {}\n", if name == "udp_unreplied" { 3 } else { 1 })
            })
            .collect();
        let t = parse(&format!("[conntrack.timeouts]\n{all}")).unwrap();
        use lb_dataplane::conntrack::ConnState::{UdpAnswered, UdpUnreplied};
        for s in lb_dataplane::conntrack::ConnState::ALL {
            let want = if matches!(s, UdpUnreplied | UdpAnswered) {
                3
            } else {
                1
            };
            assert_eq!(t.of(s), secs(want), "{s:?}");
        }
    }

    #[test]
    fn durations_and_seconds() {
        let t =
            parse("[conntrack.timeouts]\ntcp_established = \"1h30m\"\nudp_replied = 60\nicmp = \"10s\"\n")
                .unwrap();
        assert_eq!(
            (t.tcp_established, t.udp_replied, t.icmp),
            (secs(5400), secs(60), secs(10))
        );
        assert_eq!(
            non_default(&t).as_deref(),
            Some("tcp_established=5400s udp_replied=60s icmp=10s")
        );
        // The inline-table spelling is the same table.
        let u =
            parse("[conntrack]\ntimeouts = { tcp_established = 5400, udp_replied = \"1m\", icmp = 10 }\n")
                .unwrap();
        assert_eq!(t, u);
        assert_eq!(
            parse("[conntrack.timeouts]\ntcp_established = \"7d\"\n")
                .unwrap()
                .tcp_established,
            secs(604_800)
        );
    }

    #[test]
    fn bounds() {
        for (v, want) in [
            ("0", "tcp_fin_wait: 0 s is not within 1..=604800 s"),
            ("-5", "tcp_fin_wait: -5 s is not within 1..=604800 s"),
            ("604801", "tcp_fin_wait: 604801 s is not within 1..=604800 s"),
            ("\"8d\"", "tcp_fin_wait: 691200 s is not within 1..=604800 s"),
            ("\"0s\"", "tcp_fin_wait: 0 s is not within"),
            ("99999999999", "tcp_fin_wait: 99999999999 s is not within"),
            ("\"5x\"", "tcp_fin_wait: \"5x\" is not a duration"),
            (
                "1.5",
                "tcp_fin_wait: must be a duration such as \"15m\" or a whole number of seconds",
            ),
            ("true", "tcp_fin_wait: must be a duration"),
        ] {
            let e = parse(&format!("[conntrack.timeouts]\ntcp_fin_wait = {v}\n")).unwrap_err();
            assert!(
                e.starts_with("conntrack.timeouts.") && e.contains(want),
                "{v}: {e}"
            );
        }
        let t = parse("[conntrack.timeouts]\ntcp_fin_wait = 1\ntcp_close = 604800\n").unwrap();
        assert_eq!((t.tcp_fin_wait, t.tcp_close), (secs(1), secs(604_800)));
    }

    #[test]
    fn udp_unreplied_outlasts_the_stream_delay() {
        for v in [1, 2] {
            let e = parse(&format!("[conntrack.timeouts]\nudp_unreplied = {v}\n")).unwrap_err();
            assert_eq!(
                e,
                format!("conntrack.timeouts.udp_unreplied: {v} s is too short: an answered UDP flow becomes a stream by a packet 2 s after the answer, within this timeout; give at least 3 s")
            );
        }
        assert_eq!(
            parse("[conntrack.timeouts]\nudp_unreplied = 3\n")
                .unwrap()
                .udp_unreplied,
            secs(3)
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = parse("[conntrack.timeouts]\ntcp_establshed = 60\n").unwrap_err();
        assert!(e.contains("tcp_establshed"), "{e}");
        let e = parse("[conntrack]\nsize = 1024\n").unwrap_err();
        assert!(e.contains("size"), "{e}");
    }

    /// A client-only establishment may not outlive an answered one; left
    /// out, it follows a shorter `tcp_established` down.
    #[test]
    fn unreplied_is_at_most_established() {
        let e = parse("[conntrack.timeouts]\ntcp_established_unreplied = 901\n").unwrap_err();
        assert_eq!(
            e,
            "conntrack.timeouts.tcp_established_unreplied: 901 s is longer than tcp_established (900 s): a connection the backend has not answered may not outlive one it has"
        );
        let e = parse("[conntrack.timeouts]\ntcp_established = 60\ntcp_established_unreplied = 61\n")
            .unwrap_err();
        assert!(e.contains("61 s is longer than tcp_established (60 s)"), "{e}");
        let t =
            parse("[conntrack.timeouts]\ntcp_established = 60\ntcp_established_unreplied = 60\n").unwrap();
        assert_eq!(t.tcp_established_unreplied, secs(60));
        let t = parse("[conntrack.timeouts]\ntcp_established = 120\n").unwrap();
        assert_eq!(t.tcp_established_unreplied, secs(120));
        assert_eq!(
            non_default(&t).as_deref(),
            Some("tcp_established=120s tcp_established_unreplied=120s")
        );
        let t = parse("[conntrack.timeouts]\ntcp_established = 3600\n").unwrap();
        assert_eq!(t.tcp_established_unreplied, secs(300));
    }
}
