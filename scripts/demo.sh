#!/usr/bin/env bash
# The demo lab: lbd on a veth pair, attached with net_af_packet and without
# hugepages, and a client in a network namespace that resolves lbd's address
# with ARP and pings it. Needs no NIC. Run as root:
#   sudo scripts/demo.sh            # until Ctrl-C
#   sudo scripts/demo.sh --seconds 10
# Everything it creates (namespace, veth, lbd) is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

SECONDS_TO_RUN=0
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_TO_RUN="$2"; shift 2 ;;
        -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
        *) echo "demo: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (network namespaces need it): sudo $0" >&2; exit 1; }

scripts/setup.sh
echo "demo: building lbd (release)"
cargo build --release --quiet -p lbd
LBD=target/release/lbd

NS=lbd-demo-client
HOST_IF=lbd-demo0      # lbd's side, in the root namespace
NS_IF=lbd-demo-c0      # the client's side
LBD_ADDR=10.200.0.1
CLIENT_ADDR=10.200.0.2
WORK=$(mktemp -d /tmp/lbd-demo.XXXXXX)
LBD_PID=""

cleanup() {
    set +e
    if [ -n "$LBD_PID" ] && kill -0 "$LBD_PID" 2>/dev/null; then
        kill -TERM "$LBD_PID"; wait "$LBD_PID"
        echo "demo: lbd stopped; its final counters:"; sed -n '/final counters/,$p' "$WORK/lbd.log"
    fi
    ip link del "$HOST_IF" 2>/dev/null
    ip netns del "$NS" 2>/dev/null
    rm -rf "$WORK"
    echo "demo: lab removed"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

ip link del "$HOST_IF" 2>/dev/null || true
ip netns del "$NS" 2>/dev/null || true
ip netns add "$NS"
ip link add "$HOST_IF" type veth peer name "$NS_IF"
ip link set "$NS_IF" netns "$NS"
ip link set "$HOST_IF" up
sysctl -qw "net.ipv6.conf.$HOST_IF.disable_ipv6=1" || true
ip netns exec "$NS" ip addr add "$CLIENT_ADDR/24" dev "$NS_IF"
ip netns exec "$NS" ip link set "$NS_IF" up
ip netns exec "$NS" ip link set lo up
# veth hands AF_PACKET partial checksums unless transmit offload is off.
ip netns exec "$NS" ethtool -K "$NS_IF" tx off >/dev/null

cat > "$WORK/lbd.toml" <<TOML
[[interface]]
address = "$LBD_ADDR/24"
TOML

echo "demo: starting lbd on $HOST_IF (net_af_packet, --no-huge)"
"$LBD" --lcores 0-1 --no-huge --mem 512 --file-prefix lbd-demo \
    --vdev "net_af_packet0,iface=$HOST_IF" --config "$WORK/lbd.toml" >"$WORK/lbd.log" 2>&1 &
LBD_PID=$!
for _ in $(seq 1 100); do
    grep -q "lbd running" "$WORK/lbd.log" && break
    kill -0 "$LBD_PID" 2>/dev/null || { cat "$WORK/lbd.log"; echo "demo: lbd failed to start" >&2; exit 1; }
    sleep 0.1
done
sed 's/^/  lbd| /' "$WORK/lbd.log"

echo "demo: the client ($NS, $CLIENT_ADDR) pings lbd ($LBD_ADDR); Ctrl-C ends the demo"
if [ "$SECONDS_TO_RUN" -gt 0 ]; then
    ip netns exec "$NS" ping -c "$SECONDS_TO_RUN" -i 1 -W 1 "$LBD_ADDR" || true
else
    ip netns exec "$NS" ping -i 1 -W 1 "$LBD_ADDR" || true
fi
echo "demo: the client's ARP entry for lbd (resolved by lbd itself):"
ip netns exec "$NS" ip neigh show "$LBD_ADDR"
