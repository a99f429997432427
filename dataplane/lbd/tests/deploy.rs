//! The example deployment, deploy/kubernetes/lbd.yaml, for lbd's part:
//! its container's flags are flags lbd takes, and the lbd.toml of its
//! ConfigMap is a configuration lbd loads. (The objects against the
//! Kubernetes schema and the sidecar's part: control/k8s-sync's
//! tests/deploy.rs.)

use serde_json::Value;

#[path = "../../../control/k8s-sync/tests/deploy_yaml/mod.rs"]
mod deploy_yaml;
use deploy_yaml::documents;

/// lbd's container.
fn lbd_container(docs: &[Value]) -> Value {
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let containers = ds["spec"]["template"]["spec"]["containers"].as_array().unwrap();
    containers.iter().find(|c| c["name"] == "lbd").unwrap().clone()
}

/// Its args, with the pod's values for $(VARIABLES).
fn args(c: &Value) -> Vec<String> {
    let args: Vec<String> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("$(NODE_NAME)", "gw-1")
                .replace("$(POD_IP)", "192.0.2.9")
        })
        .collect();
    assert!(args.iter().all(|a| !a.contains("$(")), "{args:?}");
    args
}

#[test]
fn lbds_flags_are_its_own() {
    let c = lbd_container(&documents());
    assert_eq!(c["command"], serde_json::json!(["/usr/local/bin/lbd"]));
    let args = args(&c);
    // Help (exit 0) only once every flag before it parsed; a flag lbd
    // does not have, or a bad value, is exit 2.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lbd"))
        .args(&args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    // Each $(VARIABLE) the args use is defined.
    let env: Vec<&str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for v in ["NODE_NAME", "POD_IP"] {
        assert!(env.contains(&v), "{v} in {env:?}");
    }
    // The socket the sidecar talks to, in the volume both mount; the state
    // file in the node's directory.
    assert!(args.contains(&"--grpc=/run/lbd/lbd.sock".to_string()), "{args:?}");
    let mounted = |path: &str| {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == path)
    };
    assert!(mounted("/run/lbd") && mounted("/var/lib/lbd"));
    assert!(args.contains(&"--state-file=/var/lib/lbd/state.json".to_string()));
    // Ready by lbd's /healthz, on its --metrics port.
    let probe = &c["readinessProbe"]["httpGet"];
    assert_eq!(probe["path"], "/healthz");
    let port = probe["port"].as_u64().unwrap();
    assert!(args.contains(&format!("--metrics=192.0.2.9:{port}")), "{args:?}");
}

#[test]
fn one_device_for_each_interface() {
    // lbd stops at start when DPDK has another number of ports than the
    // config has [[interface]] tables.
    let docs = documents();
    let cm = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    let config: toml::Table = cm["data"]["lbd.toml"].as_str().unwrap().parse().unwrap();
    let interfaces = config["interface"].as_array().unwrap().len();
    let devices = args(&lbd_container(&docs))
        .iter()
        .filter(|a| a.starts_with("--pci=") || a.starts_with("--vdev="))
        .count();
    assert_eq!(devices, interfaces);
}

#[test]
fn the_config_maps_lbd_toml_loads() {
    let docs = documents();
    let cm = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    let dir = std::env::temp_dir().join(format!("lbd-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("lbd.toml");
    std::fs::write(&cfg, cm["data"]["lbd.toml"].as_str().unwrap()).unwrap();
    // lbd loads the config first, then checks its listener and devices
    // before it touches EAL: with a device no machine here has, it stops
    // at that device, the config read and accepted.
    let sock = dir.join("lbd.sock");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lbd"))
        .arg("--config")
        .arg(&cfg)
        .arg("--grpc")
        .arg(&sock)
        .args(["--pci", "0000:fe:1f.7", "--no-huge"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("0000:fe:1f.7") && !err.contains("lbd.toml"), "{err}");
    // The mount path is where the args look.
    let c = lbd_container(&docs);
    assert!(args(&c).contains(&"--config=/etc/lbd/lbd.toml".to_string()));
    let mounts = c["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "config" && m["mountPath"] == "/etc/lbd"),
        "{mounts:?}"
    );
}
