//! The lbd control API, package `lb.v1`: generated from `lb.proto`.
//!
//! The generated messages, the `LoadBalancer` client and server, the file
//! descriptor set for gRPC server reflection, and the service's codec,
//! which bounds what a request may decode to ([`bounded`]).

pub mod bounded;

/// Package `lb.v1`.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("lb.v1");

    /// The encoded `FileDescriptorSet` of lb.proto, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("lb_descriptor");
}
