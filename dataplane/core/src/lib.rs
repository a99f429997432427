//! The lbd packet pipeline, with no I/O.
//!
//! This crate is deterministic: it reads no clock (time comes in as a
//! [`Tick`]), opens no socket, spawns no thread, logs nothing per packet and
//! allocates nothing on the per-packet path. The DPDK shell in `lbd` pumps it:
//! it hands frames in as `&mut [u8]` and acts on the verdicts that come back.
//! Everything here is therefore testable on byte buffers, fuzzable and
//! benchable to the nanosecond.
//!
//! Modules:
//! - [`wire`]: zero-copy views over Ethernet, 802.1Q, ARP, IPv4, IPv6, TCP,
//!   UDP and ICMP, smoltcp-style (`new_checked`, then accessors never panic).
//! - [`checksum`]: full and RFC 1624 incremental Internet checksums.
//! - [`drop`](mod@drop): [`DropReason`], the `#[repr(u8)]` enum that indexes the
//!   per-worker drop counters.
//! - [`local`]: answers for the balancer's own addresses (ARP, ICMP echo,
//!   ICMPv6 echo and neighbor solicitation).
//! - [`maglev`]: the Maglev consistent-hash ring.
//! - [`affinity`]: the node's client-IP session affinity pins, shared by the
//!   workers without a lock.
//! - [`flow`] and [`conntrack`]: flow keys and the per-worker connection table.
//! - [`prefetch`]: how the burst path warms the lines its lookups will read.
#![forbid(unsafe_code)]

pub mod affinity;
pub mod checksum;
pub mod conntrack;
pub mod counters;
pub mod drop;
pub mod flow;
pub mod local;
pub mod maglev;
pub mod nat;
pub mod prefetch;
pub mod reject;
pub mod snapshot;
pub mod time;
pub mod wire;
pub mod worker;

pub use drop::DropReason;
pub use prefetch::{Loads, Prefetch};
pub use snapshot::{Snapshot, SnapshotBuilder};
pub use time::Tick;
