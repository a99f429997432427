#!/usr/bin/env bash
# The whole test suite: set-up, formatting, lint and doc-link checks, then every test
# of every crate (unit, DPDK wrapper tests on virtual devices, lbd end to end
# on network namespaces). Needs root for namespaces: run it in a root shell
# (`sudo -i`), with root's rustup toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

scripts/setup.sh

# DPDK keeps a runtime folder per --file-prefix under /var/run/dpdk (~8 MB
# each, on a tmpfs on a stock Debian) and never removes it. The tests'
# prefixes end in the test process's id: remove those of processes that
# are gone, now and when this script ends, however it ends.
clean_dpdk_runtime() {
    local d pid
    for d in /var/run/dpdk/dpdk-test-* /var/run/dpdk/lbdtest-* /var/run/dpdk/lbde2e-* /var/run/dpdk/lbbt-*; do
        [ -d "$d" ] || continue
        pid=${d##*-}
        case $pid in '' | *[!0-9]*) continue ;; esac
        kill -0 "$pid" 2>/dev/null || rm -rf "$d" 2>/dev/null || true
    done
}
# The end-to-end tests' labs (namespaces, veths, backend servers) go with
# their tests; a run stopped with Ctrl-C skips that: take down whatever lab
# is left, but the demo's.
clean_labs() {
    local d
    for d in /tmp/lbd-lab-*; do
        [ -d "$d" ] || continue
        [ "${d#/tmp/lbd-lab-}" = demo ] && continue
        scripts/lab.sh down "${d#/tmp/lbd-lab-}" 2>/dev/null || true
    done
}
log=$(mktemp /tmp/lbd-test.XXXXXX.log)
clean_dpdk_runtime
trap 'clean_dpdk_runtime; clean_labs; rm -f "$log"' EXIT

echo "test: cargo fmt --check"
cargo fmt --all -- --check
echo "test: cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "test: cargo doc (broken links are errors), public and private items"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --document-private-items --quiet
# The fuzz crate is its own workspace (libfuzzer-sys): the commands above
# do not see it, and an API change would break its targets silently. They
# compile without nightly features (running them needs RUSTC_BOOTSTRAP=1,
# see dataplane/fuzz/README.md).
echo "test: fuzz targets compile"
cargo check --quiet --manifest-path dataplane/fuzz/Cargo.toml --bins
echo "test: cargo test"
# cargo test's exit status is taken from the pipe without letting set -e end
# the script, so the summary line is printed on failure too.
set +e
cargo test --workspace --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# No `test result:` line at all (the build failed): still a summary.
summary=$( (grep -E '^test result:' "$log" || true) | awk '{p+=$4; f+=$6; i+=$8} END {print p+0" passed, "f+0" failed, "i+0" skipped"}')
echo "test: $summary"
exit "$status"
