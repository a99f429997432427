//! [`BuildError`]: why a snapshot could not be built. Every message names
//! the object (service, frontend, backend, port, address) and the field, so
//! the control plane can hand it to the operator as is.

use std::net::IpAddr;

use crate::local::LocalAddrsError;
use crate::maglev::MaglevError;

/// Why [`SnapshotBuilder`](super::SnapshotBuilder) refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The service name is not `namespace/name` with two DNS labels.
    #[error("service {name:?}: field name: {reason}")]
    ServiceName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Two services share a name.
    #[error("service {name}: field name: duplicate service name")]
    DuplicateService {
        /// The shared name.
        name: String,
    },
    /// [`Snapshot::with_services`](super::Snapshot::with_services) was
    /// given a service the snapshot does not have.
    #[error(
        "service {name}: field name: not in the previous snapshot (adding a service needs a full build)"
    )]
    NotInSnapshot {
        /// The name given.
        name: String,
    },
    /// A `ServiceId` that this builder did not issue.
    #[error("service id {id} was not issued by this builder")]
    UnknownService {
        /// The id's index.
        id: u32,
    },
    /// A frontend (address, port, protocol) is claimed twice.
    #[error("frontend {frontend}: claimed by service {first} and by service {second}")]
    DuplicateFrontend {
        /// `addr:port/proto`.
        frontend: String,
        /// The service that claimed it first.
        first: String,
        /// The service that claimed it again (may equal `first`).
        second: String,
    },
    /// A frontend with port 0.
    #[error("service {service} frontend {addr}/{proto}: field port: must not be 0")]
    FrontendPortZero {
        /// Owning service.
        service: String,
        /// Frontend address.
        addr: IpAddr,
        /// Frontend protocol.
        proto: &'static str,
    },
    /// A frontend with a protocol other than TCP or UDP.
    #[error("service {service} frontend {frontend}: field proto: only tcp and udp can be load balanced")]
    UnsupportedProtocol {
        /// Owning service.
        service: String,
        /// `addr:port/proto`.
        frontend: String,
    },
    /// A frontend address nobody can own: not one host's
    /// ([`is_host_address`](super::is_host_address)).
    #[error("service {service} frontend {frontend}: field addr: not one host's address (unspecified, 0/8, loopback, multicast, broadcast or IPv4-mapped)")]
    FrontendAddress {
        /// Owning service.
        service: String,
        /// `addr:port/proto`.
        frontend: String,
    },
    /// The service has source ranges, none of the frontend's family: the
    /// frontend would refuse every client, which is never what was meant.
    #[error(
        "service {service} frontend {frontend}: field source_ranges: no {family} range, \
         so every client would be denied"
    )]
    SourceRangeFamily {
        /// Owning service.
        service: String,
        /// `addr:port/proto`.
        frontend: String,
        /// "IPv4" or "IPv6".
        family: &'static str,
    },
    /// A full-NAT frontend with no SNAT address of its family.
    #[error("service {service} frontend {frontend}: field mode: full-NAT needs an {family} SNAT address")]
    NoSnatAddress {
        /// Owning service.
        service: String,
        /// `addr:port/proto`.
        frontend: String,
        /// "IPv4" or "IPv6".
        family: &'static str,
    },
    /// A backend with port 0.
    #[error("service {service} backend {addr}: field port: must not be 0")]
    BackendPortZero {
        /// Owning service.
        service: String,
        /// Backend address.
        addr: IpAddr,
    },
    /// A backend at an address traffic to it cannot leave lbd by: a
    /// loopback address, or one lbd owns (an interface, frontend or SNAT
    /// address; lbd has no host stack to deliver to); or the broadcast
    /// address of a prefix on one of lbd's ports, which names every host
    /// there.
    #[error("service {service} backend {addr}:{port}: field addr: {what}")]
    BackendIsLocal {
        /// Owning service.
        service: String,
        /// Backend address.
        addr: IpAddr,
        /// Backend port.
        port: u16,
        /// "a loopback address" or which of lbd's own addresses it is.
        what: &'static str,
    },
    /// A frontend at the broadcast address of a prefix on one of lbd's
    /// ports (10.0.0.255 on a port at 10.0.0.1/24): the hosts there send
    /// to it as to all of them.
    #[error("service {service} frontend {frontend}: field addr: the broadcast address of a prefix on one of lbd's ports")]
    FrontendIsBroadcast {
        /// Owning service.
        service: String,
        /// `addr:port/proto`.
        frontend: String,
    },
    /// An SNAT address at the broadcast address of a prefix on one of
    /// lbd's ports: the backends there would answer all of its hosts.
    #[error("snat address {addr}: the broadcast address of a prefix on one of lbd's ports")]
    SnatIsBroadcast {
        /// The address.
        addr: IpAddr,
    },
    /// A backend address that cannot receive unicast traffic.
    #[error("service {service} backend {addr}:{port}: field addr: unspecified, multicast or broadcast")]
    BackendAddress {
        /// Owning service.
        service: String,
        /// Backend address.
        addr: IpAddr,
        /// Backend port.
        port: u16,
    },
    /// A backend weight above [`MAX_WEIGHT`](super::MAX_WEIGHT).
    #[error("service {service} backend {addr}:{port}: field weight: {weight} exceeds {max}")]
    BackendWeight {
        /// Owning service.
        service: String,
        /// Backend address.
        addr: IpAddr,
        /// Backend port.
        port: u16,
        /// The weight given.
        weight: u32,
        /// The maximum.
        max: u32,
    },
    /// The same backend address and port twice in one service.
    #[error("service {service} backend {addr}:{port}: duplicate backend")]
    DuplicateBackend {
        /// Owning service.
        service: String,
        /// Backend address.
        addr: IpAddr,
        /// Backend port.
        port: u16,
    },
    /// More backends in one service than a ring can index.
    #[error("service {service}: field backends: more than {max} backends")]
    TooManyBackends {
        /// The service.
        service: String,
        /// The limit ([`MAX_BACKENDS`](crate::maglev::MAX_BACKENDS)).
        max: usize,
    },
    /// The service's ring could not be built.
    #[error("service {service}: Maglev ring: {source}")]
    Maglev {
        /// The service.
        service: String,
        /// The ring error.
        source: MaglevError,
    },
    /// A `stats_slot` above [`MAX_STATS_SLOT`](super::MAX_STATS_SLOT).
    #[error("{object}: field stats_slot: {slot} exceeds {max}")]
    StatsSlotTooLarge {
        /// The frontend or backend, named.
        object: String,
        /// The slot given.
        slot: u32,
        /// The maximum.
        max: u32,
    },
    /// An SNAT address that is also a frontend address: replies to SNAT
    /// ports and new connections to the VIP could not be told apart.
    #[error("snat address {addr}: also a frontend address")]
    SnatIsVip {
        /// The address.
        addr: IpAddr,
    },
    /// An SNAT address that cannot be a unicast source: not one host's
    /// ([`is_host_address`](super::is_host_address)).
    #[error("snat address {addr}: not one host's address (unspecified, 0/8, loopback, multicast, broadcast or IPv4-mapped)")]
    SnatAddress {
        /// The address.
        addr: IpAddr,
    },
    /// More SNAT addresses (both families together, duplicates counted
    /// once) than a worker's port pool holds.
    #[error("snat addresses: {count} addresses exceed {max} (IPv4 and IPv6 together)")]
    TooManySnatAddresses {
        /// How many distinct addresses were given, up to the first one
        /// over the limit.
        count: usize,
        /// The limit ([`SnatPorts::MAX_ADDRESSES`](crate::flow::SnatPorts::MAX_ADDRESSES)).
        max: usize,
    },
    /// A port id at or above [`MAX_PORTS`](super::MAX_PORTS).
    #[error("port {port}: id exceeds the maximum {max}")]
    PortOutOfRange {
        /// The port id.
        port: u16,
        /// The limit.
        max: u16,
    },
    /// A port MAC that is multicast, broadcast or zero.
    #[error("port {port}: field mac: {mac} is not a unicast MAC")]
    InterfaceMac {
        /// The port id.
        port: u16,
        /// The MAC, as text.
        mac: String,
    },
    /// A VLAN id that cannot be used: out of range, on a port without an
    /// interface, or a second one for a port.
    #[error("port {port}: field vlan: {vid}: {reason}")]
    Vlan {
        /// The port id.
        port: u16,
        /// The VLAN id.
        vid: u16,
        /// Why.
        reason: &'static str,
    },
    /// An MTU that cannot be used: out of range, on a port without an
    /// interface, a second one for a port, or below 1280 on a port with
    /// an IPv6 address.
    #[error("port {port}: field mtu: {mtu}: {reason}")]
    Mtu {
        /// The port id.
        port: u16,
        /// The MTU.
        mtu: u16,
        /// Why.
        reason: &'static str,
    },
    /// A port without a VLAN id where another port has one: frames keep
    /// their tag from port to port, so tagged and untagged ports cannot be
    /// mixed.
    #[error("port {port}: field vlan: none, but another port has one: set a VLAN on every port or on none")]
    VlanMissing {
        /// The port id.
        port: u16,
    },
    /// Two interfaces of one port with different MACs.
    #[error("port {port}: field mac: {first} and {second} given for the same port")]
    InterfaceMacConflict {
        /// The port id.
        port: u16,
        /// The first MAC.
        first: String,
        /// The other MAC.
        second: String,
    },
    /// An interface address that cannot be owned: not one host's
    /// ([`is_host_address`](super::is_host_address)), or the network or
    /// broadcast address of its own IPv4 prefix (/30 and shorter).
    #[error("port {port}: field cidr: {addr} is not one host's address (unspecified, 0/8, loopback, multicast, broadcast or IPv4-mapped), or its prefix's network or broadcast address")]
    InterfaceAddress {
        /// The port id.
        port: u16,
        /// The address.
        addr: IpAddr,
    },
    /// A gateway outside the port's prefixes of its family.
    #[error("port {port}: field gateway: {gateway} is not in any of the port's prefixes")]
    GatewayNotConnected {
        /// The port id.
        port: u16,
        /// The gateway.
        gateway: IpAddr,
    },
    /// A gateway no ARP or neighbor solicitation could ever resolve: one
    /// of lbd's own addresses (interface, frontend or SNAT), or the network
    /// or broadcast address of an IPv4 prefix (/30 and shorter).
    #[error("port {port}: field gateway: {gateway} is {what}")]
    GatewayUnusable {
        /// The port id.
        port: u16,
        /// The gateway.
        gateway: IpAddr,
        /// Why.
        what: &'static str,
    },
    /// Two different gateways of one family on one port.
    #[error("port {port}: field gateway: {first} and {second} given for the same family")]
    GatewayConflict {
        /// The port id.
        port: u16,
        /// The first gateway.
        first: IpAddr,
        /// The other gateway.
        second: IpAddr,
    },
    /// A neighbor outside every connected prefix.
    #[error("neighbor {addr}: field addr: not in any port's prefix")]
    NeighborNotConnected {
        /// The address.
        addr: IpAddr,
    },
    /// A neighbor given twice with different MACs.
    #[error("neighbor {addr}: field mac: {first} and {second} given")]
    NeighborConflict {
        /// The address.
        addr: IpAddr,
        /// The first MAC.
        first: String,
        /// The other MAC.
        second: String,
    },
    /// A neighbor MAC that is multicast, broadcast or zero.
    #[error("neighbor {addr}: field mac: {mac} is not a unicast MAC")]
    NeighborMac {
        /// The address.
        addr: IpAddr,
        /// The MAC, as text.
        mac: String,
    },
    /// The port's local address set was refused (should not happen after
    /// the checks above; kept so no input can panic the builder).
    #[error("port {port}: local addresses: {source}")]
    LocalAddrs {
        /// The port id.
        port: u16,
        /// The error.
        source: LocalAddrsError,
    },
}
