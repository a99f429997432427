//! The IPv4 accessors of [`Conntrack`] for the worker's fast path
//! (`worker/fast.rs`): raw octets in and out, so an established packet
//! never builds a [`FlowKey`](crate::flow::FlowKey) or an `IpAddr`.
//!
//! They read the same table as [`Conntrack::lookup`] and
//! [`Conntrack::rewrite`] and give the same answers (a test compares them
//! on every entry of a busy table).

use super::table::RawKey;
use super::{raw_rewrite, Conntrack, Direction, EntryId};

/// [`Rewrite`](super::Rewrite) of an IPv4 connection, as octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewriteV4 {
    /// New source address.
    pub src: [u8; 4],
    /// New source port.
    pub src_port: u16,
    /// New destination address.
    pub dst: [u8; 4],
    /// New destination port.
    pub dst_port: u16,
}

impl Conntrack {
    /// [`Conntrack::lookup`] of the IPv4 key `src:sport → dst:dport` with
    /// IP protocol `proto`.
    #[inline(always)]
    pub fn lookup_v4(
        &self,
        src: [u8; 4],
        dst: [u8; 4],
        sport: u16,
        dport: u16,
        proto: u8,
    ) -> Option<(EntryId, Direction)> {
        let k = RawKey {
            src,
            dst,
            sport,
            dport,
            proto,
        };
        self.v4.find(&k, self.v4.hash(&k)).map(|(i, d)| (EntryId(i), d))
    }

    /// Loads the home index slot of the IPv4 key `src:sport → dst:dport`
    /// and returns something derived from it, for the caller to sink into
    /// `black_box`: a warming load for a key about to be looked up or
    /// inserted (the burst path's new connections' reply keys).
    #[inline]
    pub fn peek_v4(&self, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> u32 {
        let k = RawKey {
            src,
            dst,
            sport,
            dport,
            proto,
        };
        self.v4.peek_home(self.v4.hash(&k))
    }

    /// [`Conntrack::rewrite`] of an IPv4 connection; `None` for a stale or
    /// IPv6 id.
    #[inline(always)]
    pub fn rewrite_v4(&self, id: EntryId, dir: Direction) -> Option<RewriteV4> {
        if id.is_v6() {
            return None;
        }
        let ((src, src_port), (dst, dst_port)) = raw_rewrite(self.v4.get(id.0)?, dir);
        Some(RewriteV4 {
            src,
            src_port,
            dst,
            dst_port,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::conntrack::{Config, Nat, Tags};
    use crate::flow::{FlowKey, FlowKeyV4, Proto};
    use crate::Tick;

    fn octets(ip: IpAddr) -> [u8; 4] {
        match ip {
            IpAddr::V4(a) => a.octets(),
            IpAddr::V6(_) => panic!("IPv4 only"),
        }
    }

    #[test]
    fn raw_accessors_agree_with_the_general_ones() {
        let mut ct = Conntrack::new(Config::new(512, 16)).unwrap();
        let mut keys = Vec::new();
        for i in 0..400u32 {
            let key = FlowKey::V4(FlowKeyV4 {
                src: Ipv4Addr::from(0x0a00_0000 + i % 37),
                dst: Ipv4Addr::new(192, 0, 2, 1 + (i % 3) as u8),
                sport: 1024 + i as u16,
                dport: 80,
                proto: if i % 4 == 0 { Proto::Udp } else { Proto::Tcp },
            });
            let backend = (IpAddr::V4(Ipv4Addr::new(10, 9, 0, (i % 5) as u8)), 8080);
            let nat = if i % 2 == 0 {
                Nat::Dnat { backend }
            } else {
                let snat = (IpAddr::V4(Ipv4Addr::new(10, 8, 0, 1)), 2000 + i as u16);
                Nat::FullNat { backend, snat }
            };
            ct.insert(key, nat, Tags::default(), Tick(0), |_| {}).unwrap();
            keys.push(key);
            keys.push(nat.reply_key(&key).unwrap());
        }
        // Keys that are not tracked, too.
        keys.push(FlowKey::V4(FlowKeyV4 {
            src: Ipv4Addr::new(1, 2, 3, 4),
            dst: Ipv4Addr::new(192, 0, 2, 1),
            sport: 1,
            dport: 80,
            proto: Proto::Tcp,
        }));
        for key in keys {
            let FlowKey::V4(k) = key else { unreachable!() };
            let raw = ct.lookup_v4(k.src.octets(), k.dst.octets(), k.sport, k.dport, k.proto as u8);
            assert_eq!(raw, ct.lookup(&key), "{key:?}");
            let Some((id, dir)) = raw else { continue };
            let rw = ct.rewrite(id, dir).unwrap();
            let got = ct.rewrite_v4(id, dir).unwrap();
            assert_eq!(
                (got.src, got.src_port, got.dst, got.dst_port),
                (octets(rw.src.0), rw.src.1, octets(rw.dst.0), rw.dst.1)
            );
        }
    }
}
