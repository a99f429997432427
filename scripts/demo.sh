#!/usr/bin/env bash
# The demo lab: a client and three HTTP backends in network namespaces, lbd
# in between on two veth pairs (net_af_packet, no hugepages, no NIC). A
# services file gives lbd a full-NAT service on VIP 10.200.1.100:80; the
# client then opens new connections to the VIP in a loop and prints, every
# second, how they spread over the backends. Run as root:
#   sudo scripts/demo.sh                 # until Ctrl-C
#   sudo scripts/demo.sh --seconds 10    # ten rounds
#   sudo scripts/demo.sh --mode dnat     # DNAT instead of full-NAT
# lbd's Prometheus metrics are at http://127.0.0.1:9650/metrics while it
# runs (DEMO_METRICS=IP:PORT for another address).
# Everything it creates (namespaces, veths, servers, lbd) is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

ROUNDS=0
MODE=fullnat
METRICS="${DEMO_METRICS:-127.0.0.1:9650}"
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds)
            ROUNDS="${2-}"
            case $ROUNDS in '' | *[!0-9]*) echo "demo: --seconds takes a whole number of rounds" >&2; exit 2 ;; esac
            shift 2 ;;
        --mode) MODE="${2-}"; shift $(($# > 1 ? 2 : 1)) ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "demo: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
done
case "$MODE" in fullnat|dnat) ;; *) echo "demo: --mode is fullnat or dnat" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (network namespaces need it): sudo $0" >&2; exit 1; }
# One demo at a time: a second would take the first one's lab down (same
# namespaces, veths and DPDK prefix).
exec 9>/run/lbd-demo.lock
flock -n 9 || { echo "demo: another demo is running" >&2; exit 1; }

scripts/setup.sh
echo "demo: building lbd and lbctl (release)"
cargo build --release --quiet -p lbd -p lb-control --bin lbd --bin lbctl
LBD=target/release/lbd
LBCTL=target/release/lbctl

TAG=demo
NET=200
VIP=10.$NET.1.100
WORK=$(mktemp -d /tmp/lbd-demo.XXXXXX)
SOCK=$WORK/lbd.sock
LBD_PID=""

cleanup() {
    set +e
    # A second Ctrl-C must not cut the clean-up short: the lab and lbd
    # would stay behind.
    trap '' INT TERM HUP
    if [ -n "$LBD_PID" ] && kill -0 "$LBD_PID" 2>/dev/null; then
        kill -TERM "$LBD_PID"
        # Bounded: lbd gives in-flight calls 5 s; past 15 s it is stuck.
        for _ in $(seq 1 150); do kill -0 "$LBD_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$LBD_PID" 2>/dev/null && echo "demo: lbd did not stop in 15 s; killed"
        wait "$LBD_PID"
        echo "demo: lbd stopped; its final counters:"; sed -n '/final counters/,$p' "$WORK/lbd.log"
    fi
    scripts/lab.sh down "$TAG"
    rm -rf "$WORK"
    echo "demo: lab removed"
}
trap cleanup EXIT
trap 'exit 0' INT TERM HUP

echo "demo: creating the lab (client 10.$NET.1.2, backends 10.$NET.2.11-13)"
# Neither the lab's backends nor lbd hold the lock (fd 9): one left behind
# would keep every later demo out, even one that could clean it up.
scripts/lab.sh up "$TAG" "$NET" 9>&-

cat > "$WORK/lbd.toml" <<TOML
# lbd's two ports: the client side, then the backend side.
[[interface]]
address = "10.$NET.1.1/24"

[[interface]]
address = "10.$NET.2.1/24"

# Full-NAT source address: the backends answer it, so replies return to lbd.
[snat]
addresses = ["10.$NET.2.100"]

[[service]]
name = "demo/web"
mode = "$MODE"

[[service.frontend]]
address = "$VIP:80"
protocol = "tcp"
type = "load-balancer"

[[service.backend]]
address = "10.$NET.2.11:8080"

[[service.backend]]
address = "10.$NET.2.12:8080"

[[service.backend]]
address = "10.$NET.2.13:8080"
TOML

echo "demo: starting lbd (net_af_packet on ${TAG}c and ${TAG}s, --no-huge)"
# In a session of its own: Ctrl-C sends SIGINT to the terminal's whole
# foreground process group, and lbd, already stopping on it, took the TERM
# that cleanup sends next as a second signal and exited at once, without
# its final counters. Now its one signal is cleanup's.
# LBD_LOG=info: the wait below looks for the info-level "lbd running",
# which an inherited LBD_LOG=warn would hide.
LBD_LOG=info setsid "$LBD" --lcores 0 --no-huge --mem 512 --file-prefix lbd-demo --grpc "$SOCK" \
    --vdev "net_af_packet0,iface=${TAG}c" --vdev "net_af_packet1,iface=${TAG}s" \
    --config "$WORK/lbd.toml" --metrics "$METRICS" >"$WORK/lbd.log" 2>&1 9>&- &
LBD_PID=$!
started=0
for _ in $(seq 1 100); do
    grep -q "lbd running" "$WORK/lbd.log" && { started=1; break; }
    kill -0 "$LBD_PID" 2>/dev/null || { cat "$WORK/lbd.log"; echo "demo: lbd failed to start" >&2; exit 1; }
    sleep 0.1
done
[ "$started" = 1 ] || { cat "$WORK/lbd.log"; echo "demo: lbd did not start in 10 s" >&2; exit 1; }
sed 's/^/  lbd| /' "$WORK/lbd.log"
echo "demo: lbctl --server $SOCK get backends"
"$LBCTL" --server "$SOCK" get backends | sed 's/^/  /'

echo "demo: the client opens 30 connections a round to http://$VIP/ ($MODE); Ctrl-C ends the demo"
round=0
while [ "$ROUNDS" -eq 0 ] || [ "$round" -lt "$ROUNDS" ]; do
    round=$((round + 1))
    counts=$(ip netns exec "$TAG-c" sh -c \
        "for i in \$(seq 30); do curl -s -m 2 --no-keepalive http://$VIP/whoami || echo 'failed -'; done" |
        awk '{n[$1]++; src=$2} END {for (b in n) printf "%s=%d ", b, n[b]; printf "(backends saw source %s)", src}')
    echo "  round $round: $counts"
    sleep 1
done
echo "demo: curl -s http://$METRICS/metrics | grep -E 'lbd_(backend_connections|worker_new_connections)_total'"
curl -s -m 5 "http://$METRICS/metrics" | grep -E '^lbd_(backend_connections|worker_new_connections)_total' | sed 's/^/  /'
