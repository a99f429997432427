//! The documents of deploy/kubernetes/lbd.yaml, as JSON values: read by
//! the `deploy` tests of lb-k8s-sync and of lbd (both crates two levels
//! below the repository's root, which the path below assumes).

use serde::Deserialize;
use serde_json::Value;

/// Each YAML document of the example deployment, in order.
pub fn documents() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/kubernetes/lbd.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect()
}
