//! One helper shared by the test crates that build a binary of another
//! package with a nested `cargo build` (included by path).

use std::process::Command;

/// Takes out of `c`'s environment what cargo set for the running test's
/// package (`CARGO_PKG_*`, `CARGO_MANIFEST_*`, ...), which describes that
/// package, not the build: a build script that declares one of them
/// (ring's declares `CARGO_MANIFEST_DIR`) would run again in the nested
/// build, and so would everything above it, then again at the next `cargo
/// test` (two minutes each in release).
pub fn without_package_env(c: &mut Command) {
    for (k, _) in std::env::vars() {
        if ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_BIN_"]
            .iter()
            .any(|p| k.starts_with(p))
            || [
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .contains(&k.as_str())
        {
            c.env_remove(k);
        }
    }
}
