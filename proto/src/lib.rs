//! The lbd control API, package `lb.v1`: generated from `lb.proto`.
//!
//! Nothing but the generated messages, the `LoadBalancer` client and server,
//! and the file descriptor set for gRPC server reflection.
#![allow(missing_docs, clippy::all)]

/// Package `lb.v1`.
pub mod v1 {
    tonic::include_proto!("lb.v1");

    /// The encoded `FileDescriptorSet` of lb.proto, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("lb_descriptor");
}
