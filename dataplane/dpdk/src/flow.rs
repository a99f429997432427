//! `rte_flow` rules that steer packets to an rx queue in the NIC.
//!
//! lbd's use: full-NAT replies carry the owning worker in the low bits of
//! the SNAT port, so one rule per (SNAT address, protocol, worker) —
//! destination address = SNAT address, destination port & mask = worker —
//! sends each reply to its owner's queue and no worker has to hand it
//! over. PMDs without rte_flow (net_af_packet, net_memif, ...) refuse the
//! rule at validation; the caller then keeps software hand-over.

use std::ffi::CStr;
use std::net::Ipv4Addr;

use dpdk_sys as sys;

use crate::Port;

/// Why a rule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("port {port}: rte_flow rule refused: {message} (errno {errno})")]
pub struct FlowError {
    /// The port.
    pub port: u16,
    /// The PMD's message.
    pub message: String,
    /// The negative errno's magnitude.
    pub errno: i32,
}

/// The L4 protocol a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// An installed rule; destroyed on drop. Holds its port open.
#[derive(Debug)]
pub struct FlowRule {
    port: Port,
    flow: *mut sys::rte_flow,
}

// SAFETY: the rule handle is only passed back to rte_flow_destroy, which
// DPDK allows from any thread (flow API calls are thread-safe per port
// unless the PMD says otherwise; lbd creates and destroys them on one
// thread).
unsafe impl Send for FlowRule {}

fn error(port: u16, rc: i32, e: &sys::rte_flow_error) -> FlowError {
    let message = if e.message.is_null() {
        "no reason given".to_string()
    } else {
        // SAFETY: a non-null message is a NUL-terminated static string the
        // PMD set (rte_flow_error_set).
        unsafe { CStr::from_ptr(e.message) }
            .to_string_lossy()
            .into_owned()
    };
    FlowError {
        port,
        message,
        errno: rc.unsigned_abs() as i32,
    }
}

impl FlowRule {
    /// Steers IPv4 `l4` packets to `dst` whose destination port satisfies
    /// `dst_port & port_mask == port_value` to rx queue `queue` of `port`.
    /// Validated first, then created.
    pub fn steer_v4_dst_port(
        port: &Port,
        dst: Ipv4Addr,
        l4: L4,
        port_value: u16,
        port_mask: u16,
        queue: u16,
    ) -> Result<FlowRule, FlowError> {
        let id = port.id();
        // SAFETY: rte_flow_attr and the item structs are plain C data for
        // which all-zero bytes are a valid value (no references, no enums
        // that zero would not name).
        let mut attr: sys::rte_flow_attr = unsafe { std::mem::zeroed() };
        attr.set_ingress(1);
        // SAFETY: as above.
        let mut ip_spec: sys::rte_flow_item_ipv4 = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut ip_mask: sys::rte_flow_item_ipv4 = unsafe { std::mem::zeroed() };
        ip_spec.hdr.dst_addr = u32::from(dst).to_be();
        ip_mask.hdr.dst_addr = u32::MAX;
        // SAFETY: as above.
        let mut tcp_spec: sys::rte_flow_item_tcp = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut tcp_mask: sys::rte_flow_item_tcp = unsafe { std::mem::zeroed() };
        tcp_spec.hdr.dst_port = port_value.to_be();
        tcp_mask.hdr.dst_port = port_mask.to_be();
        // SAFETY: as above.
        let mut udp_spec: sys::rte_flow_item_udp = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut udp_mask: sys::rte_flow_item_udp = unsafe { std::mem::zeroed() };
        udp_spec.hdr.dst_port = port_value.to_be();
        udp_mask.hdr.dst_port = port_mask.to_be();
        let null = std::ptr::null();
        let item = |type_, spec: *const std::ffi::c_void, mask: *const std::ffi::c_void| sys::rte_flow_item {
            type_,
            spec,
            last: null,
            mask,
        };
        let l4_item = match l4 {
            L4::Tcp => item(
                sys::RTE_FLOW_ITEM_TYPE_TCP,
                (&tcp_spec as *const sys::rte_flow_item_tcp).cast(),
                (&tcp_mask as *const sys::rte_flow_item_tcp).cast(),
            ),
            L4::Udp => item(
                sys::RTE_FLOW_ITEM_TYPE_UDP,
                (&udp_spec as *const sys::rte_flow_item_udp).cast(),
                (&udp_mask as *const sys::rte_flow_item_udp).cast(),
            ),
        };
        let pattern = [
            item(sys::RTE_FLOW_ITEM_TYPE_ETH, null, null),
            item(
                sys::RTE_FLOW_ITEM_TYPE_IPV4,
                (&ip_spec as *const sys::rte_flow_item_ipv4).cast(),
                (&ip_mask as *const sys::rte_flow_item_ipv4).cast(),
            ),
            l4_item,
            item(sys::RTE_FLOW_ITEM_TYPE_END, null, null),
        ];
        let q = sys::rte_flow_action_queue { index: queue };
        let actions = [
            sys::rte_flow_action {
                type_: sys::RTE_FLOW_ACTION_TYPE_QUEUE,
                conf: (&q as *const sys::rte_flow_action_queue).cast(),
            },
            sys::rte_flow_action {
                type_: sys::RTE_FLOW_ACTION_TYPE_END,
                conf: null,
            },
        ];
        // One control call on the port at a time; counted in it once made.
        let mut control = port.control();
        // SAFETY: all-zero is a valid rte_flow_error (null pointers).
        let mut err: sys::rte_flow_error = unsafe { std::mem::zeroed() };
        // SAFETY: attr, pattern (END-terminated) and actions (END-terminated)
        // and everything they point to live until after the call; err is
        // writable; id is a configured port (Port exists).
        let rc = unsafe { sys::rte_flow_validate(id, &attr, pattern.as_ptr(), actions.as_ptr(), &mut err) };
        if rc != 0 {
            return Err(error(id, rc, &err));
        }
        // SAFETY: as for validate.
        let flow = unsafe { sys::rte_flow_create(id, &attr, pattern.as_ptr(), actions.as_ptr(), &mut err) };
        if flow.is_null() {
            // rte_flow_create reports why in rte_errno (positive).
            return Err(error(id, -crate::last_errno(), &err));
        }
        *control += 1;
        Ok(FlowRule {
            port: port.clone(),
            flow,
        })
    }
}

impl Drop for FlowRule {
    fn drop(&mut self) {
        let mut control = self.port.control();
        *control -= 1;
        // SAFETY: all-zero is a valid rte_flow_error.
        let mut err: sys::rte_flow_error = unsafe { std::mem::zeroed() };
        // SAFETY: flow came from rte_flow_create on this port, which is
        // still open (self.port holds it), and is destroyed exactly once.
        let rc = unsafe { sys::rte_flow_destroy(self.port.id(), self.flow, &mut err) };
        if rc != 0 {
            tracing::warn!("{}", error(self.port.id(), rc, &err));
        }
    }
}
