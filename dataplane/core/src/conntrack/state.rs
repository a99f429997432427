//! Connection states, their timeouts, and the TCP state machine.
//!
//! The machine follows the packets' flags only, like IPVS and unlike
//! nf_conntrack's window tracking: the balancer never checks sequence
//! numbers, so a RST is believed as it is. Every transition is a pure
//! function of (state, direction, flags, who sent the first FIN), which
//! keeps it exhaustively testable.

use core::time::Duration;

use super::Direction;
use crate::flow::Proto;

/// TCP flag bits as they sit in byte 13 of the TCP header.
pub mod tcp_flags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
}

/// The state of a tracked connection.
///
/// TCP states are named from the connection's point of view (the client
/// opened it in the original direction), not from the balancer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ConnState {
    /// The client's SYN was seen, nothing from the backend yet.
    TcpSynSent = 0,
    /// The backend's SYN-ACK was seen; the client's ACK was not.
    TcpSynRecv,
    /// Three-way handshake done, or the client's ACK after a SYN-ACK seen
    /// or not, once the backend has sent anything.
    TcpEstablished,
    /// One side sent a FIN.
    TcpFinWait,
    /// The other side acknowledged the first FIN but has not sent its own.
    TcpCloseWait,
    /// Both sides sent FIN; the last ACK is outstanding.
    TcpLastAck,
    /// The last ACK was seen.
    TcpTimeWait,
    /// A RST was seen.
    TcpClose,
    /// UDP, only the original direction seen so far.
    UdpUnreplied,
    /// UDP, the backend answered and the flow went on for at least
    /// [`UDP_STREAM_AFTER`] after that answer ("stream" in nf_conntrack
    /// terms, "assured"): an established flow.
    UdpReplied,
    /// ICMP echo, no reply yet.
    IcmpUnreplied,
    /// ICMP echo, the backend answered.
    IcmpReplied,
    /// The client ACKed with nothing seen from the backend (a mid-stream
    /// pickup, or an ACK after a SYN-ACK lbd did not see): established
    /// (its timeout), but evicted as embryonic until the backend's first
    /// packet makes it [`ConnState::TcpEstablished`], as Linux's conntrack
    /// protects only entries with traffic both ways ("assured").
    TcpEstablishedUnreplied,
    /// UDP, answered, but not (yet) a stream: a request and its answer (a
    /// DNS lookup, its A and AAAA queries from one socket included). On the
    /// unreplied timeout, counted from the first answer, and evicted as
    /// embryonic, as nf_conntrack (Linux 5.13 on) keeps a UDP flow
    /// unassured until it is still active 2 s after it began: otherwise
    /// every DNS lookup would hold an entry, and under full-NAT a SNAT
    /// port, for the replied timeout, never evictable. A packet either way
    /// [`UDP_STREAM_AFTER`] or more after the first answer makes it
    /// [`ConnState::UdpReplied`]; earlier ones leave the timeout running.
    UdpAnswered,
}

/// How long after its first answer a UDP flow must still be sending to
/// count as a stream ([`ConnState::UdpReplied`]): nf_conntrack's 2 s.
pub const UDP_STREAM_AFTER: Duration = Duration::from_secs(2);

impl ConnState {
    /// Number of states.
    pub const COUNT: usize = ConnState::UdpAnswered as usize + 1;

    /// Every state, in discriminant order.
    pub const ALL: [ConnState; ConnState::COUNT] = [
        ConnState::TcpSynSent,
        ConnState::TcpSynRecv,
        ConnState::TcpEstablished,
        ConnState::TcpFinWait,
        ConnState::TcpCloseWait,
        ConnState::TcpLastAck,
        ConnState::TcpTimeWait,
        ConnState::TcpClose,
        ConnState::UdpUnreplied,
        ConnState::UdpReplied,
        ConnState::IcmpUnreplied,
        ConnState::IcmpReplied,
        ConnState::TcpEstablishedUnreplied,
        ConnState::UdpAnswered,
    ];

    /// The state a new entry starts in.
    #[inline]
    pub const fn initial(proto: Proto) -> ConnState {
        match proto {
            Proto::Tcp => ConnState::TcpSynSent,
            Proto::Udp => ConnState::UdpUnreplied,
            Proto::Icmp | Proto::Icmpv6 => ConnState::IcmpUnreplied,
        }
    }

    /// True if the packet that opens a connection of `proto` (TCP flags
    /// `tcp_flags`, ignored for UDP and ICMP) leaves it in
    /// [`ConnState::initial`]: accounting it on the new entry would then
    /// only restart the timeout the insert has just set. False for a TCP
    /// RST (closes) and an ACK without SYN (a mid-stream pickup:
    /// established, or closing with a FIN).
    /// Agrees with the state machine for every flag byte (tested).
    #[inline]
    pub const fn first_packet_keeps_initial(proto: Proto, tcp_flags: u8) -> bool {
        use tcp_flags::{ACK, RST, SYN};
        match proto {
            Proto::Tcp => tcp_flags & RST == 0 && (tcp_flags & ACK == 0 || tcp_flags & SYN != 0),
            Proto::Udp | Proto::Icmp | Proto::Icmpv6 => true,
        }
    }

    /// How willingly an entry in this state is evicted under pressure.
    #[inline]
    pub const fn class(self) -> EvictClass {
        match self {
            ConnState::TcpSynSent
            | ConnState::TcpSynRecv
            | ConnState::UdpUnreplied
            | ConnState::IcmpUnreplied
            | ConnState::TcpEstablishedUnreplied
            | ConnState::UdpAnswered => EvictClass::Embryonic,
            ConnState::TcpFinWait
            | ConnState::TcpCloseWait
            | ConnState::TcpLastAck
            | ConnState::TcpTimeWait
            | ConnState::TcpClose => EvictClass::Closing,
            ConnState::TcpEstablished | ConnState::UdpReplied | ConnState::IcmpReplied => {
                EvictClass::Established
            }
        }
    }

    #[inline]
    pub(crate) fn from_u8(n: u8) -> ConnState {
        // Only values written by this module are ever stored.
        ConnState::ALL[n as usize]
    }
}

/// Eviction classes, most evictable first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EvictClass {
    /// Unanswered: a SYN without handshake, unreplied UDP or ICMP. Under a
    /// SYN flood these are the attack, so they go first.
    Embryonic,
    /// TCP closing or closed: nobody is waiting on these.
    Closing,
    /// Live traffic in both directions: never evicted before it expires.
    Established,
}

/// Per-state idle timeouts: an entry expires this long after its last packet.
///
/// The defaults follow IPVS (`ip_vs_proto_tcp.c`, `ip_vs_proto_udp.c`),
/// because a balancer's table is sized for churn, not for the 5-day
/// established timeout of nf_conntrack:
///
/// | state | default | source |
/// |---|---|---|
/// | `tcp_syn_sent` | 60 s | IPVS `SYN_RECV` (the state IPVS enters on a client SYN); nf_conntrack `syn_sent` is 120 s |
/// | `tcp_syn_recv` | 60 s | nf_conntrack `syn_recv` / IPVS `SYN_RECV` |
/// | `tcp_established` | 900 s | IPVS `ESTABLISHED` (nf_conntrack: 432000 s) |
/// | `tcp_established_unreplied` | 300 s | nf_conntrack `unacknowledged`, which caps a mid-connection pickup's timeout |
/// | `tcp_fin_wait` | 120 s | IPVS `FIN_WAIT` |
/// | `tcp_close_wait` | 60 s | IPVS `CLOSE_WAIT` |
/// | `tcp_last_ack` | 30 s | IPVS `LAST_ACK` |
/// | `tcp_time_wait` | 120 s | IPVS `TIME_WAIT` |
/// | `tcp_close` | 10 s | IPVS `CLOSE` |
/// | `udp_unreplied` | 30 s | nf_conntrack `udp_timeout`; also a UDP flow answered but not yet a stream ([`ConnState::UdpAnswered`]) |
/// | `udp_replied` | 300 s | IPVS `UDP` (nf_conntrack `udp_timeout_stream`: 120 s) |
/// | `icmp` | 30 s | nf_conntrack `icmp_timeout` |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Client SYN seen, no answer.
    pub tcp_syn_sent: Duration,
    /// SYN-ACK seen, handshake not finished.
    pub tcp_syn_recv: Duration,
    /// Established.
    pub tcp_established: Duration,
    /// Established by the client alone, nothing from the backend yet
    /// (`ConnState::TcpEstablishedUnreplied`). Shorter than
    /// `tcp_established` because a live connection's backend answers
    /// within a round trip: an entry that stays unreplied is a pickup
    /// whose backend is gone, or a SYN-then-ACK flood, which under
    /// full-NAT would otherwise hold an SNAT port for the established
    /// timeout.
    pub tcp_established_unreplied: Duration,
    /// One FIN seen.
    pub tcp_fin_wait: Duration,
    /// First FIN acknowledged, second not yet sent.
    pub tcp_close_wait: Duration,
    /// Both FINs seen, last ACK outstanding.
    pub tcp_last_ack: Duration,
    /// Closed cleanly.
    pub tcp_time_wait: Duration,
    /// Reset.
    pub tcp_close: Duration,
    /// UDP without a reply, or answered but not yet a stream.
    pub udp_unreplied: Duration,
    /// UDP stream: answered, and still sending [`UDP_STREAM_AFTER`] after.
    pub udp_replied: Duration,
    /// ICMP echo, replied or not.
    pub icmp: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        let s = Duration::from_secs;
        Timeouts {
            tcp_syn_sent: s(60),
            tcp_syn_recv: s(60),
            tcp_established: s(900),
            tcp_established_unreplied: s(300),
            tcp_fin_wait: s(120),
            tcp_close_wait: s(60),
            tcp_last_ack: s(30),
            tcp_time_wait: s(120),
            tcp_close: s(10),
            udp_unreplied: s(30),
            udp_replied: s(300),
            icmp: s(30),
        }
    }
}

impl Timeouts {
    /// The timeout of one state.
    pub fn of(&self, state: ConnState) -> Duration {
        match state {
            ConnState::TcpSynSent => self.tcp_syn_sent,
            ConnState::TcpSynRecv => self.tcp_syn_recv,
            ConnState::TcpEstablished => self.tcp_established,
            ConnState::TcpEstablishedUnreplied => self.tcp_established_unreplied,
            ConnState::TcpFinWait => self.tcp_fin_wait,
            ConnState::TcpCloseWait => self.tcp_close_wait,
            ConnState::TcpLastAck => self.tcp_last_ack,
            ConnState::TcpTimeWait => self.tcp_time_wait,
            ConnState::TcpClose => self.tcp_close,
            ConnState::UdpUnreplied | ConnState::UdpAnswered => self.udp_unreplied,
            ConnState::UdpReplied => self.udp_replied,
            ConnState::IcmpUnreplied | ConnState::IcmpReplied => self.icmp,
        }
    }

    /// Milliseconds per state, indexed by discriminant, for the packet path.
    pub(crate) fn millis_table(&self) -> [u64; ConnState::COUNT] {
        ConnState::ALL.map(|s| u64::try_from(self.of(s).as_millis()).unwrap_or(u64::MAX))
    }
}

/// One step of the state machine.
///
/// `fin_by_reply` records which side sent the first FIN (the "closer"), so
/// that the closing states can tell the closer's packets from the other
/// side's. Returns the new state and the new `fin_by_reply`.
///
/// Deliberate leniencies, because the balancer is a middlebox that may
/// miss packets (asymmetric return paths, a restart mid-connection):
/// - a client ACK (without SYN) in `TcpSynSent` or `TcpSynRecv` establishes
///   the connection, as in IPVS, even if the SYN-ACK was not seen; from
///   `TcpSynSent` (nothing seen from the backend) as
///   `TcpEstablishedUnreplied`, evicted as embryonic and with the shorter
///   `tcp_established_unreplied` timeout until the backend's first packet
///   (so a flood of SYN-then-ACK, or of bare ACKs picked up by DNAT, cannot
///   fill the table with entries that are never evicted, nor hold full-NAT
///   SNAT ports for the established timeout);
///   with a FIN, it is closing instead;
/// - a client SYN in `TcpLastAck`, `TcpTimeWait` or `TcpClose` reopens the
///   entry (port reuse by the client, the last ACK perhaps lost), as
///   nf_conntrack does; otherwise the new connection would live on in the
///   closing states' 30 s and 120 s timeouts. The worker does not let it
///   come to this: it ends such an entry and opens a new connection, with
///   a new backend pick ([`Conntrack::reopened_by_syn`](super::Conntrack::reopened_by_syn));
/// - a backend SYN-ACK in `TcpFinWait` or `TcpCloseWait` (a client reusing
///   its port while the old connection was half closed, the client's SYN
///   having gone to the old entry's backend) resyncs the entry to
///   `TcpSynRecv`, so the new connection becomes established;
/// - a RST from either side closes, in any state.
#[inline]
pub(crate) fn step(state: ConnState, dir: Direction, flags: u8, fin_by_reply: bool) -> (ConnState, bool) {
    use tcp_flags::{ACK, FIN, RST, SYN};
    use ConnState::*;
    let orig = dir == Direction::Original;
    match state {
        // The promotion to a stream depends on time: `advance` makes it.
        UdpUnreplied if !orig => return (UdpAnswered, fin_by_reply),
        IcmpUnreplied if !orig => return (IcmpReplied, fin_by_reply),
        UdpUnreplied | UdpAnswered | UdpReplied | IcmpUnreplied | IcmpReplied => {
            return (state, fin_by_reply)
        }
        _ => {}
    }
    let (syn, ack, fin, rst) = (
        flags & SYN != 0,
        flags & ACK != 0,
        flags & FIN != 0,
        flags & RST != 0,
    );
    if rst {
        return (TcpClose, fin_by_reply);
    }
    // True when this packet comes from the side that sent the first FIN.
    let from_closer = orig != fin_by_reply;
    // The backend's first packet on an entry the client alone established.
    let state = if state == TcpEstablishedUnreplied && !orig {
        TcpEstablished
    } else {
        state
    };
    let next = match state {
        TcpSynSent if !orig && syn && ack => TcpSynRecv,
        // A pickup that starts with the client's FIN is closing.
        TcpSynSent if orig && ack && fin && !syn => return (TcpFinWait, false),
        TcpSynSent if orig && ack && !syn => TcpEstablishedUnreplied,
        TcpSynRecv | TcpEstablished | TcpEstablishedUnreplied if fin => return (TcpFinWait, !orig),
        TcpSynRecv if orig && ack && !syn => TcpEstablished,
        // A backend SYN-ACK answers a new handshake on the same ports (the
        // client reused them while the old connection was half closed):
        // resync, as nf_conntrack does, rather than run the new
        // connection on the closing timeouts, evictable as closing.
        TcpFinWait | TcpCloseWait if !orig && syn && ack => return (TcpSynRecv, false),
        TcpFinWait | TcpCloseWait if !from_closer && fin => TcpLastAck,
        TcpFinWait if !from_closer && ack => TcpCloseWait,
        TcpLastAck if from_closer && ack => TcpTimeWait,
        TcpLastAck | TcpTimeWait | TcpClose if orig && syn && !ack => return (TcpSynSent, false),
        s => s,
    };
    (next, fin_by_reply)
}

#[cfg(test)]
mod tests {
    use super::tcp_flags::*;
    use super::*;
    use ConnState::*;
    use Direction::{Original as O, Reply as R};

    #[test]
    fn first_packet_keeps_initial_agrees_with_step() {
        for proto in [Proto::Tcp, Proto::Udp, Proto::Icmp, Proto::Icmpv6] {
            let init = ConnState::initial(proto);
            for flags in 0..=u8::MAX {
                let stepped = step(init, O, flags, false);
                assert_eq!(
                    ConnState::first_packet_keeps_initial(proto, flags),
                    stepped == (init, false),
                    "{proto:?} flags {flags:#04x} -> {stepped:?}"
                );
            }
        }
    }

    /// Runs a packet sequence from the initial TCP state, returning the states.
    fn run(packets: &[(Direction, u8)]) -> Vec<ConnState> {
        let (mut s, mut f) = (TcpSynSent, false);
        packets
            .iter()
            .map(|&(d, fl)| {
                (s, f) = step(s, d, fl, f);
                s
            })
            .collect()
    }

    #[test]
    fn full_handshake_and_close_by_client() {
        let got = run(&[
            (O, SYN),
            (R, SYN | ACK),
            (O, ACK),
            (O, ACK),
            (R, ACK),
            (O, FIN | ACK),
            (R, ACK),
            (R, FIN | ACK),
            (O, ACK),
            (O, SYN),
        ]);
        assert_eq!(
            got,
            [
                TcpSynSent,
                TcpSynRecv,
                TcpEstablished,
                TcpEstablished,
                TcpEstablished,
                TcpFinWait,
                TcpCloseWait,
                TcpLastAck,
                TcpTimeWait,
                TcpSynSent
            ]
        );
    }

    #[test]
    fn close_by_backend_tracks_the_closer() {
        let got = run(&[
            (O, SYN),
            (R, SYN | ACK),
            (O, ACK),
            (R, FIN | ACK),
            (O, FIN | ACK),
            (R, ACK),
        ]);
        assert_eq!(got[3..], [TcpFinWait, TcpLastAck, TcpTimeWait]);
        // The closer's own retransmitted FIN and the other side's plain ACK
        // before its FIN do not confuse the direction.
        let got = run(&[
            (O, ACK),
            (R, FIN),
            (R, FIN),
            (O, ACK),
            (R, ACK),
            (O, FIN),
            (R, ACK),
        ]);
        assert_eq!(
            got,
            [
                TcpEstablishedUnreplied,
                TcpFinWait,
                TcpFinWait,
                TcpCloseWait,
                TcpCloseWait,
                TcpLastAck,
                TcpTimeWait
            ]
        );
    }

    #[test]
    fn rst_closes_from_any_state_and_syn_reopens() {
        let tcp = ConnState::ALL[..8]
            .iter()
            .copied()
            .chain([TcpEstablishedUnreplied]);
        for s in tcp {
            for d in [O, R] {
                assert_eq!(step(s, d, RST | ACK, false).0, TcpClose, "{s:?} {d:?}");
            }
        }
        assert_eq!(step(TcpClose, O, SYN, true), (TcpSynSent, false));
        // Also with the last ACK of the old connection lost, from either
        // closer.
        assert_eq!(step(TcpLastAck, O, SYN, true), (TcpSynSent, false));
        assert_eq!(step(TcpLastAck, O, SYN, false), (TcpSynSent, false));
        assert_eq!(step(TcpLastAck, R, SYN, false).0, TcpLastAck);
        // A SYN from the backend, or a SYN-ACK, does not reopen.
        assert_eq!(step(TcpClose, R, SYN, false).0, TcpClose);
        assert_eq!(step(TcpTimeWait, O, SYN | ACK, false).0, TcpTimeWait);
    }

    #[test]
    fn a_syn_ack_on_a_half_closed_entry_resyncs_it() {
        for (st, fin_by_reply) in [
            (TcpFinWait, false),
            (TcpFinWait, true),
            (TcpCloseWait, false),
            (TcpCloseWait, true),
        ] {
            // The client's SYN on the reused ports changes nothing...
            assert_eq!(step(st, O, SYN, fin_by_reply), (st, fin_by_reply));
            // ...the backend's SYN-ACK starts the new handshake, which the
            // client's ACK completes.
            let (next, by_reply) = step(st, R, SYN | ACK, fin_by_reply);
            assert_eq!((next, by_reply), (TcpSynRecv, false), "{st:?}");
            assert_eq!(step(next, O, ACK, by_reply).0, TcpEstablished);
        }
    }

    #[test]
    fn lenient_pickup_and_ignored_packets() {
        // Client ACK without a seen SYN-ACK (asymmetric path) establishes,
        // evictable as embryonic until the backend's first packet.
        assert_eq!(step(TcpSynSent, O, ACK, false).0, TcpEstablishedUnreplied);
        assert_eq!(TcpEstablishedUnreplied.class(), EvictClass::Embryonic);
        assert_eq!(
            step(TcpEstablishedUnreplied, O, ACK, false).0,
            TcpEstablishedUnreplied
        );
        assert_eq!(step(TcpEstablishedUnreplied, R, ACK, false).0, TcpEstablished);
        assert_eq!(
            step(TcpEstablishedUnreplied, R, FIN | ACK, false),
            (TcpFinWait, true)
        );
        assert_eq!(
            step(TcpEstablishedUnreplied, O, FIN | ACK, false),
            (TcpFinWait, false)
        );
        // After a SYN-ACK, the client's ACK establishes outright.
        assert_eq!(step(TcpSynRecv, O, ACK, false).0, TcpEstablished);
        // A pickup from the client's FIN is closing, the client the closer.
        assert_eq!(step(TcpSynSent, O, FIN | ACK, false), (TcpFinWait, false));
        // A retransmitted SYN or a stray backend ACK keep the state.
        assert_eq!(step(TcpSynSent, O, SYN, false).0, TcpSynSent);
        assert_eq!(step(TcpSynSent, R, ACK, false).0, TcpSynSent);
        assert_eq!(step(TcpEstablished, O, SYN, false).0, TcpEstablished);
    }

    #[test]
    fn udp_and_icmp_become_replied_on_a_reply_only() {
        assert_eq!(step(UdpUnreplied, O, 0, false).0, UdpUnreplied);
        // UDP is answered first; a stream only with time (`advance`).
        assert_eq!(step(UdpUnreplied, R, 0, false).0, UdpAnswered);
        assert_eq!(step(UdpAnswered, O, 0, false).0, UdpAnswered);
        assert_eq!(step(UdpAnswered, R, 0, false).0, UdpAnswered);
        assert_eq!(step(UdpReplied, O, 0, false).0, UdpReplied);
        assert_eq!(step(IcmpUnreplied, R, 0, false).0, IcmpReplied);
        // TCP flags mean nothing to UDP.
        assert_eq!(step(UdpReplied, O, RST, false).0, UdpReplied);
    }

    #[test]
    fn classes_and_default_timeouts() {
        assert_eq!(TcpSynRecv.class(), EvictClass::Embryonic);
        assert_eq!(TcpTimeWait.class(), EvictClass::Closing);
        assert_eq!(UdpReplied.class(), EvictClass::Established);
        assert_eq!(UdpAnswered.class(), EvictClass::Embryonic);
        assert!(EvictClass::Embryonic < EvictClass::Closing && EvictClass::Closing < EvictClass::Established);
        let t = Timeouts::default();
        let ms = t.millis_table();
        assert_eq!(ms[TcpEstablished as usize], 900_000);
        assert_eq!(ms[TcpEstablishedUnreplied as usize], 300_000);
        assert_eq!(ms[UdpUnreplied as usize], 30_000);
        assert_eq!(ms[UdpAnswered as usize], 30_000);
        assert_eq!(ms[TcpClose as usize], 10_000);
        for (i, s) in ConnState::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            assert_eq!(ConnState::from_u8(i as u8), *s);
        }
    }
}
