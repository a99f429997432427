#!/usr/bin/env bash
# The lab topology of the demo and the end-to-end tests: a client and three
# backends in network namespaces, lbd's two ports in between. Run as root.
#
#   scripts/lab.sh up TAG NET     create it (TAG: at most 6 letters/digits;
#                                  NET: second octet of its addresses, 1-254)
#   scripts/lab.sh down TAG       remove everything `up` created
#
#   client ns TAG-c: eth0 10.NET.1.2/24 ----- TAGc  lbd port 0: 10.NET.1.1/24
#                                                   VIP 10.NET.1.100
#   backends TAG-b1..b3 on a bridge (ns TAG-br) ---- TAGs  lbd port 1: 10.NET.2.1/24
#     eth0 10.NET.2.11-13/24, default route via lbd      SNAT 10.NET.2.100
#
# The namespaces also have IPv6 addresses for an lbd configured with IPv6
# ports: client fd00:NET:1::2/64 (default via fd00:NET:1::1), backends
# fd00:NET:2::11-13/64 (default via fd00:NET:2::1); the backends listen on
# both families.
#
# lbd attaches to the root-namespace ends TAGc and TAGs with net_af_packet.
# Each backend runs scripts/backend.py (HTTP on 8080, UDP echo on 5353),
# named backend-1..3. Checksum and segmentation offloads are off on every
# veth: AF_PACKET would otherwise see partial checksums and 64 KiB frames.
set -euo pipefail

die() { echo "lab: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "run as root (network namespaces need it)"
cmd=${1:-}; tag=${2:-}
[[ "$tag" =~ ^[a-z0-9]{1,6}$ ]] || die "TAG must be 1-6 lowercase letters or digits (got '$tag')"
run=/tmp/lbd-lab-$tag
here=$(cd "$(dirname "$0")" && pwd)

offloads_off() { # [ns] dev
    if [ $# -eq 2 ]; then
        ip netns exec "$1" ethtool -K "$2" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
    else
        ethtool -K "$1" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
    fi
}

down() {
    if [ -d "$run" ]; then
        for f in "$run"/*.pid; do
            [ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
        done
    fi
    ip link del "${tag}c" 2>/dev/null || true
    ip link del "${tag}s" 2>/dev/null || true
    # Bridges a test may add between those ends and lbd's tap ports.
    ip link del "${tag}k0" 2>/dev/null || true
    ip link del "${tag}k1" 2>/dev/null || true
    # Backend veths an `up` that failed half-way left in this namespace.
    for i in 1 2 3; do
        ip link del "${tag}b$i" 2>/dev/null || true
        ip link del "${tag}b${i}p" 2>/dev/null || true
    done
    for ns in "$tag-c" "$tag-br" "$tag-b1" "$tag-b2" "$tag-b3"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$run"
}

up() {
    local net=${3:-}
    [[ "$net" =~ ^[0-9]+$ ]] && [ "$net" -ge 1 ] && [ "$net" -le 254 ] || die "NET must be 1-254 (got '$net')"
    down
    mkdir -p "$run"
    local c="10.$net.1" s="10.$net.2"

    # Client side.
    ip netns add "$tag-c"
    ip link add "${tag}c" type veth peer name "${tag}c1"
    ip link set "${tag}c1" netns "$tag-c"
    ip netns exec "$tag-c" ip link set "${tag}c1" name eth0
    ip netns exec "$tag-c" ip addr add "$c.2/24" dev eth0
    ip netns exec "$tag-c" ip link set eth0 up
    ip netns exec "$tag-c" ip link set lo up
    ip netns exec "$tag-c" ip route add default via "$c.1"
    ip netns exec "$tag-c" ip addr add "fd00:$net:1::2/64" dev eth0 nodad
    ip netns exec "$tag-c" ip -6 route add default via "fd00:$net:1::1"
    offloads_off "$tag-c" eth0

    # Server side: a bridge in its own namespace, lbd's port on it.
    ip netns add "$tag-br"
    ip netns exec "$tag-br" ip link add br0 type bridge
    ip netns exec "$tag-br" ip link set br0 up
    ip link add "${tag}s" type veth peer name "${tag}s1"
    ip link set "${tag}s1" netns "$tag-br"
    ip netns exec "$tag-br" ip link set "${tag}s1" master br0 up
    offloads_off "$tag-br" "${tag}s1"
    for i in 1 2 3; do
        local ns="$tag-b$i"
        ip netns add "$ns"
        ip link add "${tag}b$i" type veth peer name "${tag}b${i}p"
        ip link set "${tag}b$i" netns "$ns"
        ip link set "${tag}b${i}p" netns "$tag-br"
        ip netns exec "$tag-br" ip link set "${tag}b${i}p" master br0 up
        offloads_off "$tag-br" "${tag}b${i}p"
        ip netns exec "$ns" ip link set "${tag}b$i" name eth0
        ip netns exec "$ns" ip addr add "$s.1$i/24" dev eth0
        ip netns exec "$ns" ip link set eth0 up
        ip netns exec "$ns" ip link set lo up
        ip netns exec "$ns" ip route add default via "$s.1"
        ip netns exec "$ns" ip addr add "fd00:$net:2::1$i/64" dev eth0 nodad
        ip netns exec "$ns" ip -6 route add default via "fd00:$net:2::1"
        offloads_off "$ns" eth0
        ip netns exec "$ns" python3 "$here/backend.py" "backend-$i" 8080 5353 \
            >"$run/backend-$i.log" 2>&1 &
        echo $! >"$run/backend-$i.pid"
    done

    # lbd's ends: frames for lbd only, no host stack chatter.
    for dev in "${tag}c" "${tag}s"; do
        sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1" 2>/dev/null || true
        ip link set "$dev" up
        offloads_off "$dev"
    done

    # The backends listen within a couple of seconds (TCP 8080; the UDP
    # socket is bound before it); one that does not is an error, not a
    # test failure later.
    for i in 1 2 3; do
        local ok=0
        for _ in $(seq 1 50); do
            ip netns exec "$tag-b$i" python3 -c "import socket; socket.create_connection(('127.0.0.1', 8080), 1)" \
                2>/dev/null && { ok=1; break; }
            sleep 0.1
        done
        [ "$ok" = 1 ] || die "backend $i in $tag-b$i is not listening on 8080 after 5 s: $(tail -3 "$run/backend-$i.log" 2>/dev/null | tr '\n' ' ')"
    done
}

case "$cmd" in
    # An `up` that fails half-way (a command under `set -e`, or `die`)
    # removes what it made: namespaces, veths, the backends already started.
    up) trap down EXIT; up "$@"; trap - EXIT ;;
    down) down ;;
    *) die "usage: lab.sh up TAG NET | lab.sh down TAG" ;;
esac
