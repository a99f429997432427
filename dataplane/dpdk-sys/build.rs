//! Finds the system DPDK with pkg-config, generates bindings with bindgen and
//! compiles the C shim for DPDK's `static inline` functions.
//!
//! Every missing prerequisite ends the build with one line that names the
//! Debian package to install, rather than a page of compiler output.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// The oldest DPDK the bindings are written against (Debian 12's).
const MIN_DPDK: (u32, u32) = (22, 11);

/// DPDK libraries the safe wrappers call into.
const LIBS: &[&str] = &[
    "rte_eal",
    "rte_ethdev",
    "rte_mbuf",
    "rte_mempool",
    "rte_ring",
    "rte_bus_vdev",
];

fn fail(msg: &str) -> ! {
    // `cargo::error` shows the message once, without a backtrace.
    println!("cargo::error={msg}");
    std::process::exit(0);
}

fn pkg_config(args: &[&str]) -> Result<String, String> {
    let out = Command::new("pkg-config").args(args).output().map_err(|_| {
        "pkg-config not found: install it with `apt-get install pkg-config` (or run scripts/setup.sh)"
            .to_string()
    })?;
    if !out.status.success() {
        return Err("DPDK not found by pkg-config (libdpdk.pc): install it with `apt-get install libdpdk-dev dpdk` (or run scripts/setup.sh)".to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/shim.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let version = pkg_config(&["--modversion", "libdpdk"]).unwrap_or_else(|e| fail(&e));
    match parse_version(&version) {
        Some(v) if v >= MIN_DPDK => {}
        _ => fail(&format!(
            "DPDK {version} is too old: lbd needs DPDK {}.{} or newer (`apt-get install libdpdk-dev` on Debian 12)",
            MIN_DPDK.0, MIN_DPDK.1
        )),
    }
    let cflags_line = pkg_config(&["--cflags", "libdpdk"]).unwrap_or_else(|e| fail(&e));
    let cflags: Vec<String> = cflags_line.split_whitespace().map(str::to_string).collect();
    let libs_line = pkg_config(&["--libs-only-L", "libdpdk"]).unwrap_or_else(|e| fail(&e));
    for dir in libs_line.split_whitespace().filter_map(|f| f.strip_prefix("-L")) {
        println!("cargo:rustc-link-search=native={dir}");
    }
    for lib in LIBS {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    println!("cargo:version={version}");
    println!("cargo:rustc-env=DPDK_SYS_VERSION={version}");

    // The shim: compiled with DPDK's own flags (they include `-include rte_config.h`).
    let mut build = cc::Build::new();
    build
        .file("shim/shim.c")
        .include("shim")
        .opt_level(3)
        .warnings(false);
    for f in &cflags {
        build.flag(f);
    }
    if let Err(e) = build.try_compile("lbd_dpdk_shim") {
        fail(&format!("compiling the DPDK shim failed ({e}); is a C compiler installed? `apt-get install build-essential`"));
    }

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header("shim/shim.h")
        .clang_args(&cflags)
        .clang_arg("-Ishim")
        .allowlist_function("lbd_.*")
        .allowlist_function("rte_eal_(init|cleanup|remote_launch|wait_lcore|mp_wait_lcore|process_type|has_hugepages)")
        .allowlist_function("rte_(lcore_count|get_main_lcore|get_next_lcore|lcore_is_enabled|socket_id|lcore_to_socket_id|get_tsc_hz|strerror|thread_register|thread_unregister)")
        .allowlist_function("rte_eth_(dev_count_avail|dev_configure|dev_info_get|dev_start|dev_stop|dev_close|dev_socket_id|rx_queue_setup|tx_queue_setup|macaddr_get|link_get_nowait|stats_get|stats_reset|promiscuous_enable|promiscuous_disable|promiscuous_get|allmulticast_enable|dev_set_mtu|dev_get_mtu|dev_get_name_by_port|dev_get_port_by_name|find_next_owned_by|dev_is_valid_port|dev_adjust_nb_rx_tx_desc)")
        .allowlist_function("rte_pktmbuf_pool_create")
        .allowlist_function("rte_mempool_free")
        .allowlist_function("rte_ring_(create|free)")
        .allowlist_function("rte_flow_(validate|create|destroy|flush)")
        .allowlist_function("rte_dev_(probe|remove)")
        .allowlist_type("rte_flow_(attr|item|action|error|item_ipv4|item_ipv6|item_tcp|item_udp|action_queue)")
        .allowlist_var("RTE_(MAX_LCORE|MAX_ETHPORTS|ETHER_ADDR_LEN|PKTMBUF_HEADROOM|MBUF_DEFAULT_BUF_SIZE|RING_.*|ETH_LINK_.*|MEMPOOL_CACHE_MAX_SIZE)")
        .allowlist_var("RTE_MBUF_F_.*")
        .allowlist_var("RTE_ETH_(RSS|RX_OFFLOAD|TX_OFFLOAD|MQ)_.*")
        .allowlist_var("SOCKET_ID_ANY|LCORE_ID_ANY|RING_F_SP_ENQ|RING_F_SC_DEQ")
        .opaque_type("rte_arp_ipv4|rte_arp_hdr|rte_l2tpv2_combined_msg_hdr")
        .no_debug("rte_flow_item_gtp_psc")
        .derive_default(true)
        .prepend_enum_name(false)
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| {
            fail(&format!(
                "bindgen could not read the DPDK headers ({e}); install libclang: `apt-get install libclang-dev`"
            ))
        });
    bindings
        .write_to_file(out.join("bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("writing bindings.rs: {e}")));
}
