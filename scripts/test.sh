#!/usr/bin/env bash
# The whole test suite: set-up, formatting, lint and doc-link checks, then every test
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
echo "test: cargo doc (broken links are errors), public and private items"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --document-private-items --quiet
echo "test: cargo test"
# cargo test's exit status is taken from the pipe without letting set -e end
# the script, so the summary line is printed on failure too.
set +e
cargo test --workspace --no-fail-fast 2>&1 | tee /tmp/lbd-test.log
status=${PIPESTATUS[0]}
set -e
summary=$(grep -E '^test result:' /tmp/lbd-test.log | awk '{p+=$4; f+=$6; i+=$8} END {print p" passed, "f" failed, "i" skipped"}')
echo "test: $summary"
exit "$status"
