//! The example deployment, deploy/kubernetes/lbd.yaml: every field of
//! every object is one the API's schema has, with its type (as
//! k8s-openapi has them: an object that does not survive a round trip
//! through its type has a field the API would drop or refuse; values are
//! not checked), the pod is Guaranteed, the sidecar has the permissions it
//! uses, and its container's flags are flags it takes. (lbd's container and lbd.toml: dataplane/lbd's
//! tests/deploy.rs.)

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde::de::DeserializeOwned;
use serde_json::Value;

mod deploy_yaml;
use deploy_yaml::documents;

/// `v` as a `T`, checked to lose nothing on the way.
fn typed<T: DeserializeOwned + serde::Serialize>(v: &Value) -> T {
    let t: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v:#}"));
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(&back, v, "a field the schema does not have, or a wrong type");
    t
}

fn sidecar(ds: &DaemonSet) -> Container {
    let spec = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .find(|c| c.name == "lb-k8s-sync")
        .unwrap()
        .clone()
}

#[test]
fn every_object_is_one_kubernetes_takes() {
    let docs = documents();
    let mut kinds = Vec::new();
    for d in &docs {
        let kind = d["kind"].as_str().unwrap().to_string();
        match kind.as_str() {
            "Namespace" => drop(typed::<Namespace>(d)),
            "ServiceAccount" => drop(typed::<ServiceAccount>(d)),
            "ClusterRole" => drop(typed::<ClusterRole>(d)),
            "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(d)),
            "ConfigMap" => drop(typed::<ConfigMap>(d)),
            "DaemonSet" => drop(typed::<DaemonSet>(d)),
            other => panic!("a {other} the test does not know"),
        }
        kinds.push(kind);
    }
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet"
        ]
    );
}

#[test]
fn the_sidecar_may_do_what_it_does() {
    let docs = documents();
    let role: ClusterRole = typed(docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap());
    let may = |group: &str, resource: &str, verb: &str| {
        role.rules.iter().flatten().any(|r| {
            r.api_groups.iter().flatten().any(|g| g == group)
                && r.resources.iter().flatten().any(|x| x == resource)
                && r.verbs.iter().any(|v| v == verb)
        })
    };
    for (group, resource, verb) in [
        ("", "services", "list"),
        ("", "services", "watch"),
        ("discovery.k8s.io", "endpointslices", "list"),
        ("discovery.k8s.io", "endpointslices", "watch"),
        ("events.k8s.io", "events", "create"),
    ] {
        assert!(may(group, resource, verb), "{verb} {group}/{resource}");
    }
    let binding: ClusterRoleBinding = typed(docs.iter().find(|d| d["kind"] == "ClusterRoleBinding").unwrap());
    let ds: DaemonSet = typed(docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap());
    let pod = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let subject = &binding.subjects.as_ref().unwrap()[0];
    assert_eq!(Some(&subject.name), pod.service_account_name.as_ref());
    assert_eq!(subject.namespace, ds.metadata.namespace);
    assert_eq!(binding.role_ref.name, role.metadata.name.unwrap());
}

#[test]
fn the_pod_is_guaranteed() {
    // Every container's requests equal its limits, CPU and memory: the
    // data plane's pod is not a Burstable one (first for the OOM killer).
    let docs = documents();
    let ds: DaemonSet = typed(docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap());
    let pod = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    for c in &pod.containers {
        let r = c.resources.as_ref().unwrap();
        let (req, lim) = (r.requests.clone().unwrap(), r.limits.clone().unwrap());
        for k in ["cpu", "memory"] {
            assert!(req.contains_key(k), "{}: no {k} request", c.name);
        }
        assert_eq!(req, lim, "{}", c.name);
    }
}

#[test]
fn the_sidecars_flags_are_its_own() {
    let docs = documents();
    let ds: DaemonSet = typed(docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap());
    let c = sidecar(&ds);
    assert_eq!(
        c.command.as_deref(),
        Some(&["/usr/local/bin/lb-k8s-sync".to_string()][..])
    );
    // Its Events' reporting instance, and the address of its --metrics,
    // come from the downward API.
    let env = c.env.clone().unwrap_or_default();
    let field = |name: &str| {
        let e = env
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no {name}"));
        e.value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path
            .clone()
    };
    assert_eq!(field("POD_NAME"), "metadata.name");
    assert_eq!(field("POD_IP"), "status.podIP");
    // The flags, with the pod's values for its $(VARIABLES), parse: the
    // binary prints its help (exit 0) only after every flag before
    // --help parsed; a flag it does not have, or a bad value, is exit 2.
    let args: Vec<String> = c
        .args
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|a| a.replace("$(POD_IP)", "192.0.2.9"))
        .collect();
    assert!(args.iter().all(|a| !a.contains("$(")), "{args:?}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lb-k8s-sync"))
        .args(&args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    // The socket is the one lbd listens on, in the volume both mount.
    assert!(
        args.contains(&"--server=/run/lbd/lbd.sock".to_string()),
        "{args:?}"
    );
    let mounts = c.volume_mounts.clone().unwrap_or_default();
    assert!(mounts.iter().any(|m| m.mount_path == "/run/lbd"), "{mounts:?}");
    // The readiness probe asks its health endpoint, on its --metrics port.
    let probe = c.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap();
    assert_eq!(probe.path.as_deref(), Some("/healthz"));
    let port = match &probe.port {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => *p,
        other => panic!("{other:?}"),
    };
    assert!(args.contains(&format!("--metrics=192.0.2.9:{port}")), "{args:?}");
}
