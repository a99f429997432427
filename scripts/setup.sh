#!/usr/bin/env bash
# Idempotent set-up for building, testing and demoing lbd on Debian 12.
#
# Installs everything from Debian's packages and crates.io, checks that the
# machine's Rust toolchain (rustup's) is recent enough, then, when
# LBD_HUGEPAGES=N is set and we are root, reserves N 2 MiB hugepages and
# mounts hugetlbfs (bench/run.sh asks for 1024; the demo and the tests run
# with --no-huge and need none). Safe to run any number of times: each
# step checks before it acts.
set -euo pipefail

log() { printf 'setup: %s\n' "$*"; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        log "not root and no sudo: cannot install packages; run as root"; exit 1
    fi
fi

# Build: DPDK and its headers, pkg-config, libclang for bindgen, protoc, a C compiler.
# clang and linux-libc-dev also build the tc BPF programs that make the lab's
# namespaces VLAN ports (dataplane/lbd/tests/common/vlan_tag.bpf.c).
# Tests and demo: iproute2 (ip netns), ethtool (checksum offload off on veths),
# iputils-ping, arping, tcpdump, curl, python3 (HTTP servers in namespaces),
# socat (UDP echo), apache2-utils (ab), procps (pkill/pgrep), openssl (test CA
# for lbctl over TLS), valgrind (callgrind instruction counts); dpdk-dev has
# dpdk-testpmd, the io-forward baseline of bench/run.sh.
PACKAGES=(
    dpdk dpdk-dev libdpdk-dev pkg-config libclang-dev clang linux-libc-dev protobuf-compiler build-essential
    iproute2 ethtool iputils-ping arping tcpdump curl python3 socat apache2-utils procps
    valgrind openssl ca-certificates
)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing from Debian: ${missing[*]}"
    # A new machine's apt-daily or unattended-upgrades may hold apt's locks
    # for its first minutes: wait for them rather than fail (the timeout
    # covers the dpkg lock; the lists lock `update` takes, retries do, for
    # up to 5 minutes). `env`, as sudo resets the environment.
    apt=($SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
    for try in $(seq 1 30); do
        "${apt[@]}" update -q && break
        [ "$try" -lt 30 ] || { log "apt-get update failed 30 times"; exit 1; }
        log "apt-get update failed (another apt running?): trying again in 10 s"
        sleep 10
    done
    "${apt[@]}" install -y -q --no-install-recommends "${missing[@]}"
else
    log "Debian packages already installed"
fi

# Rust toolchain: the machine's rustup toolchain, at least the workspace's
# rust-version. Debian 12's own rustc (1.63) is far older than that, so
# installing it would only fail later, in the build: say so now instead.
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
need=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$here/Cargo.toml")
if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
    log "error: no Rust toolchain (cargo, rustc); lbd needs rustc $need or newer: install it with rustup (https://rustup.rs), then run this again"
    exit 1
fi
have=$(rustc --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
    log "error: rustc $have is older than the $need lbd needs: update it (rustup update stable), then run this again"
    exit 1
fi
log "rustc $have (lbd needs $need or newer)"
# The test suite runs cargo fmt and cargo clippy (the demo and the
# benchmarks do not): a missing one is said now rather than found later.
if command -v rustup >/dev/null 2>&1; then
    for c in rustfmt clippy; do
        rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c" >/dev/null 2>&1 || true
    done
fi
for c in fmt clippy; do
    cargo "$c" --version >/dev/null 2>&1 ||
        log "warning: cargo $c is missing (rustup component add rustfmt clippy): scripts/test.sh needs it"
done

# Hugepages: production and benchmarks use them; the demo and tests run
# with --no-huge, and reserving them would take 2 GiB from the build.
if [ -z "${LBD_HUGEPAGES:-}" ]; then
    log "no hugepages asked for (LBD_HUGEPAGES=N reserves N x 2 MiB; the demo and the tests need none)"
elif [ "$(id -u)" -eq 0 ] && [ -w /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages ]; then
    want=$LBD_HUGEPAGES
    have=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)
    if [ "$have" -lt "$want" ]; then
        echo "$want" > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages || true
        have=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)
    fi
    mkdir -p /dev/hugepages
    if ! grep -q ' /dev/hugepages hugetlbfs ' /proc/mounts; then
        mount -t hugetlbfs nodev /dev/hugepages || log "could not mount hugetlbfs on /dev/hugepages"
    fi
    log "hugepages: $have x 2 MiB reserved, hugetlbfs mounted on /dev/hugepages"
else
    log "not root: no hugepages reserved; run lbd with --no-huge, or as root:"
    log "  echo 1024 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages && mount -t hugetlbfs nodev /dev/hugepages"
fi
log "done"
