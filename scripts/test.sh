#!/usr/bin/env bash
# The whole test suite: set-up, formatting and lint checks, then every test
# of every crate (unit, DPDK wrapper tests on virtual devices, lbd end to end
# on network namespaces). Needs root for namespaces; run it as
#   sudo scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

scripts/setup.sh
echo "test: cargo fmt --check"
cargo fmt --all -- --check
echo "test: cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "test: cargo test"
cargo test --workspace --no-fail-fast 2>&1 | tee /tmp/lbd-test.log
# cargo test's exit status is lost in the pipe; recover it.
status=${PIPESTATUS[0]}
summary=$(grep -E '^test result:' /tmp/lbd-test.log | awk '{p+=$4; f+=$6; i+=$8} END {print p" passed, "f" failed, "i" skipped"}')
echo "test: $summary"
exit "$status"
