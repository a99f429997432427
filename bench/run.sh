#!/usr/bin/env bash
# End-to-end benchmark of lbd against the I/O limit of the same link, in one
# run. Two processes joined by a memif pair:
#
#   lb-bench gen (CPU G) <== memif ==> lbd, one worker (CPU D)
#   lb-bench gen (CPU G) <== memif ==> dpdk-testpmd --forward-mode=io (CPU D)
#
# lb-bench plays the clients and the backends: it sends client packets to
# the VIP, checks every packet that comes back, answers each forward packet
# as its backend would, and counts what returns (README.md beside this file).
# Each scenario runs the baseline and lbd alternately (A B A B ...) and the
# table quotes medians and the ratio lbd/baseline of packets a second
# through the device (both directions). Last, a churn run: a backend of the
# measured service changes 100 times a second through lbd's gRPC API while
# established flows run at a fixed rate; loss and violations must be zero.
#
#   bench/run.sh [--rounds N] [--seconds S] [--steps N] [--only NAME[,NAME...]] [--quick]
#   (defaults: 3 rounds, 2 s trials, 6 search steps; --quick: 1 round, 3 steps;
#   --rounds and --seconds at least 1; --only takes the names --help lists)
#   LBD=<path>: measure that lbd binary instead of target/release/lbd.
#   GEN_CPU=<G> DUT_CPU=<D>: the generator's CPU and the device's (default:
#   the first two CPUs this shell may run on, as taskset or cpuset allow).
#
# Needs root (hugepages, /run); uses hugepages when setup could reserve
# them, else --no-huge. Results: a table on stdout, every run's JSON, logs
# and the table in bench/out/<date>/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

ROUNDS=3
SECONDS_MEASURED=2
WARMUP=1
SEARCH_STEPS=6
PDR_LOSS=0.005
ONLY=""
CHURN_RATE_MPPS=0.2
CHURN_SECONDS=10
# Every scenario (the `scenario` lines below, then churn): what --only takes.
SCENARIOS="est-1k-64-fullnat est-1m-64-fullnat est-1k-512-fullnat est-1k-64-dnat est-1m-64-dnat new-64-fullnat new-64-dnat churn"
# The value of option $1, which must be a whole number (unless $3 is "text").
value() { # OPTION VALUE [text]
    [ -n "${2-}" ] || { echo "bench/run.sh: $1 needs a value (see --help)" >&2; exit 2; }
    if [ "${3-}" != text ]; then
        case $2 in *[!0-9]*) echo "bench/run.sh: $1 $2: not a whole number" >&2; exit 2 ;; esac
    fi
    printf '%s' "$2"
}
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$(value "$1" "${2-}"); shift 2 ;;
        --seconds) SECONDS_MEASURED=$(value "$1" "${2-}"); shift 2 ;;
        --steps) SEARCH_STEPS=$(value "$1" "${2-}"); shift 2 ;;
        --only) ONLY=$(value "$1" "${2-}" text); shift 2 ;;
        --quick) ROUNDS=1; SEARCH_STEPS=3; shift ;;
        -h|--help) sed -n '2,26p' "$0"; echo "# scenarios: ${SCENARIOS// /, }"; exit 0 ;;
        *) echo "bench/run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
# Zero rounds or seconds would measure nothing and still print a table.
[ "$ROUNDS" -ge 1 ] || { echo "bench/run.sh: --rounds $ROUNDS: at least 1" >&2; exit 2; }
[ "$SECONDS_MEASURED" -ge 1 ] || { echo "bench/run.sh: --seconds $SECONDS_MEASURED: at least 1" >&2; exit 2; }
# A misspelt --only name would silently run nothing.
[ -z "$ONLY" ] || [ -n "${ONLY//,/}" ] || { echo "bench/run.sh: --only $ONLY: no scenario named" >&2; exit 2; }
for name in ${ONLY//,/ }; do
    case " $SCENARIOS " in *" $name "*) ;; *)
        echo "bench/run.sh: --only $name: no such scenario (one of: ${SCENARIOS// /, })" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench/run.sh: run as root (hugepages, memif sockets)" >&2; exit 1; }
# First: what follows needs python3, and the benchmarks hugepages (which
# setup.sh reserves only when asked).
LBD_HUGEPAGES=${LBD_HUGEPAGES:-1024} scripts/setup.sh
# The CPUs this shell may use (taskset, cpusets), in order.
ALLOWED=$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')
set -- $ALLOWED
[ $# -ge 2 ] || { echo "bench/run.sh: needs 2 CPUs (generator and device on their own); allowed: $ALLOWED" >&2; exit 1; }
GEN_CPU=${GEN_CPU:-$1}
DUT_CPU=${DUT_CPU:-$2}
for v in "GEN_CPU=$GEN_CPU" "DUT_CPU=$DUT_CPU"; do
    case " $ALLOWED " in *" ${v#*=} "*) ;; *)
        echo "bench/run.sh: $v: not a CPU this shell may use ($ALLOWED)" >&2; exit 2 ;;
    esac
done
[ "$GEN_CPU" != "$DUT_CPU" ] || { echo "bench/run.sh: GEN_CPU and DUT_CPU are both $GEN_CPU: they need a CPU each" >&2; exit 2; }
# One run at a time: two would share the memif socket, the DPDK prefixes
# and the hugepage files (and each other's CPUs).
exec 9>/run/lb-bench.lock
flock -n 9 || { echo "bench/run.sh: another bench/run.sh is running" >&2; exit 1; }

echo "bench: building lbd and lb-bench in release"
cargo build --release --quiet -p lbd -p lb-bench
LBD=${LBD:-target/release/lbd}
GEN=target/release/lb-bench
TESTPMD=$(command -v dpdk-testpmd) || { echo "bench/run.sh: dpdk-testpmd not found (Debian's dpdk-dev package; run scripts/setup.sh)" >&2; exit 1; }

OUT=bench/out/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
RUN=$(mktemp -d /tmp/lb-bench.XXXXXX)
SOCK=/run/lb-bench-memif.sock
DUT_PID=""
GEN_PID=""
churn_pid=""
# Devices (lbd) that did not exit with status 0: the run fails at the end.
DUT_FAILED=""
# Stops PID with TERM and waits for it, at most 15 s, then KILL: a process
# that hangs while stopping must not hang the benchmark. Its exit status
# ends in STOPPED_STATUS (0 for a process that was already gone).
stop_wait() { # PID
    STOPPED_STATUS=0
    kill -TERM "$1" 2>/dev/null || return 0
    for _ in $(seq 1 150); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || STOPPED_STATUS=$?
}
# DPDK leaves hugepage files of exited processes; clear ours before each
# run and at the end (each left file holds a 2 MiB page until removed).
clear_huge() { rm -f /dev/hugepages/lbb-* 2>/dev/null || true; }
cleanup() {
    [ -n "$churn_pid" ] && stop_wait "$churn_pid"
    [ -n "$GEN_PID" ] && kill -TERM "$GEN_PID" 2>/dev/null || true
    [ -n "$DUT_PID" ] && stop_wait "$DUT_PID"
    [ -n "$GEN_PID" ] && stop_wait "$GEN_PID"
    clear_huge
    rm -f "$SOCK"
    rm -rf "$RUN"
}
trap cleanup EXIT

HUGE=()
free_pages=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)
if [ "$free_pages" -ge 512 ] && grep -q ' /dev/hugepages hugetlbfs ' /proc/mounts; then
    echo "bench: hugepages: $free_pages free x 2 MiB"
else
    echo "bench: fewer than 512 free hugepages: running with --no-huge (slower, noisier)"
    HUGE=(--no-huge)
fi

SNAT_COUNT=32
# lbd's config for one scenario: one interface on the memif link (clients
# 10.128.0.0/9 and backends 10.0.1.1-3 on-link), the VIP 10.0.0.100:80/tcp
# in MODE, 32 SNAT addresses (1M full-NAT flows need more than 16; 32 give
# 2M ports, more than the default 1M connections tracked, so a SYN flood
# meets conntrack pressure, which evicts embryonic entries, before SNAT port
# exhaustion, which drops).
write_config() { # MODE FILE
    {
        echo '[[interface]]'
        echo 'address = "10.0.0.1/8"'
        echo
        echo '[snat]'
        printf 'addresses = ['
        for i in $(seq 0 $((SNAT_COUNT - 1))); do
            [ "$i" -gt 0 ] && printf ', '
            printf '"10.0.0.%d"' $((200 + i))
        done
        echo ']'
        echo
        echo '[[service]]'
        echo 'name = "bench/web"'
        echo "mode = \"$1\""
        echo
        echo '[[service.frontend]]'
        echo 'address = "10.0.0.100:80"'
        echo 'protocol = "tcp"'
        for b in 1 2 3; do
            echo
            echo '[[service.backend]]'
            echo "address = \"10.0.1.$b:8080\""
        done
    } > "$2"
}

# Starts the device under test (memif server) on CPU $DUT_CPU and waits until it
# forwards. DUT: testpmd, or lbd-MODE.
start_dut() { # DUT LOG [RSIZE]
    local dut=$1 log=$2 rsize=${3:-10}
    local vdev="net_memif0,role=server,socket=$SOCK,rsize=$rsize"
    clear_huge
    # DPDK's memif binds the socket path without removing it first, and
    # removes it only when the device closes cleanly: a device that crashed
    # or was killed would make every later start fail (address in use).
    rm -f "$SOCK"
    DUT_NAME=$dut
    DUT_LOG=$log
    if [ "$dut" = testpmd ]; then
        # Without --stats-period, testpmd's main lcore blocks reading stdin
        # (an open FIFO) instead of spinning on the forwarding CPU; stdbuf makes
        # its "Press enter" line reach the log at once.
        [ -p "$RUN/testpmd.in" ] || mkfifo "$RUN/testpmd.in"
        exec 3<>"$RUN/testpmd.in"
        taskset -c "$DUT_CPU" stdbuf -oL "$TESTPMD" --lcores "0@$DUT_CPU,1@$DUT_CPU" --file-prefix lbb-dut --no-pci --no-telemetry \
            "${HUGE[@]}" $([ ${#HUGE[@]} -gt 0 ] && echo -m 512) --vdev "$vdev" -- \
            --forward-mode=io --port-topology=loop --nb-cores=1 --total-num-mbufs=32768 \
            --burst=64 --disable-link-check \
            < "$RUN/testpmd.in" > "$log" 2>&1 &
        DUT_PID=$!
        ready="Press enter to exit"
    else
        local mode=${dut#lbd-}
        write_config "$mode" "$RUN/lbd.toml"
        # Readiness is lbd's info-level "lbd running": an inherited
        # LBD_LOG=warn would hide it.
        LBD_LOG=info taskset -c "$DUT_CPU" "$LBD" --lcores "0@$DUT_CPU,1@$DUT_CPU" --file-prefix lbb-dut "${HUGE[@]}" \
            --vdev "$vdev" --config "$RUN/lbd.toml" --grpc "$RUN/lbd.sock" \
            > "$log" 2>&1 &
        DUT_PID=$!
        ready="lbd running"
    fi
    for _ in $(seq 1 100); do
        grep -q "$ready" "$log" && return 0
        kill -0 "$DUT_PID" 2>/dev/null || { echo "bench: $dut exited at start:"; tail -5 "$log"; return 1; }
        sleep 0.1
    done
    echo "bench: $dut did not come up in 10 s:"; tail -5 "$log"; return 1
}

stop_dut() {
    stop_wait "$DUT_PID"
    DUT_PID=""
    # lbd exits 0 on SIGTERM: anything else (a crash, a worker's or the
    # control thread's failure) makes the figures it produced suspect.
    if [ "$DUT_NAME" != testpmd ] && [ "$STOPPED_STATUS" != 0 ]; then
        echo "bench: $DUT_NAME exited with status $STOPPED_STATUS ($DUT_LOG):" >&2
        tail -3 "$DUT_LOG" >&2 || true
        DUT_FAILED="$DUT_FAILED $DUT_NAME($DUT_LOG)"
    fi
}

# One lb-bench run against the device (GEN_SECONDS: each trial's length;
# GEN_RSIZE: log2 of the memif rings' slots, 10 by default: the memif
# client creates the rings, so its rsize is the link's, whatever the
# server's),
# in the background; returns once its JSON summary is written (0), or
# with its exit status if it ended without one. It then stays connected,
# polling nothing (--linger), until the device is stopped: DPDK 22.11's
# memif PMD can crash the server when the client leaves while the server
# polls. Stop the device, then collect its status with gen_finish.
gen() { # NAME DUT-ARG JSON LOG ARGS...
    local name=$1 dut=$2 json=$3 log=$4; shift 4
    rm -f "$json"
    taskset -c "$GEN_CPU" "$GEN" gen --vdev "net_memif0,role=client,socket=$SOCK,rsize=${GEN_RSIZE:-10}" --lcore "$GEN_CPU" \
        --file-prefix lbb-gen "${HUGE[@]}" --dut "$dut" --scenario "$name" \
        --seconds "${GEN_SECONDS:-$SECONDS_MEASURED}" --warmup "$WARMUP" --snat 10.0.0.200 \
        --snat-count "$SNAT_COUNT" --json "$json" --linger 30 "$@" > "$log" 2>&1 &
    GEN_PID=$!
    while [ ! -e "$json" ] && kill -0 "$GEN_PID" 2>/dev/null; do sleep 0.2; done
    [ -e "$json" ] || gen_finish
}

# The exit status of the last gen, once the device has stopped.
gen_finish() {
    local st=0
    [ -n "$GEN_PID" ] && { wait "$GEN_PID" || st=$?; }
    GEN_PID=""
    return "$st"
}

# The generator's summary line (its log ends with what --linger saw).
gen_summary() { # LOG
    grep -v '^lb-bench: ' "$1" | tail -1
}

# One device, one scenario, one lb-bench run: first as fast as the link
# takes packets (MRR: what comes back under overload), then a bisection of
# the client rate for the highest one whose loss stays within PDR_LOSS (the
# partial drop rate of RFC 2544 / FD.io CSIT), SEARCH_STEPS steps, a lossy
# trial repeated once. Appends a row to RESULTS.
measure() { # NAME ROUND DUT DUT-ARG GEN-ARGS...
    local name=$1 r=$2 dut=$3 dutarg=$4; shift 4
    local tag="$name.$r.${dut%%-*}"
    start_dut "$dut" "$OUT/$tag.dut.log"
    local ok=1
    gen "$name" "$dutarg" "$OUT/$tag.json" "$OUT/$tag.gen.log" \
        --pdr "$PDR_LOSS" --steps "$SEARCH_STEPS" "$@" || ok=0
    stop_dut
    gen_finish || ok=0
    if [ "$ok" = 0 ]; then
        echo "bench: $tag: lb-bench failed:"; tail -5 "$OUT/$tag.gen.log"; exit 1
    fi
    python3 - "$OUT/$tag.json" "$name" "$r" "${dut%%-*}" >> "$RESULTS" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
p = s["pdr"] or {"through_mpps": 0.0, "latency_us": {"p50": 0.0, "p99": 0.0}}
print("\t".join(map(str, [sys.argv[2], sys.argv[3], sys.argv[4], s["mrr"]["through_mpps"],
      p["through_mpps"], s["violations"], p["latency_us"]["p50"], p["latency_us"]["p99"]])))
EOF
    printf 'bench: %-20s round %s %-8s %s\n' "$name" "$r" "${dut%%-*}" "$(gen_summary "$OUT/$tag.gen.log")"
}

# scenario NAME MODE GEN-ARGS...: baseline and lbd alternately, ROUNDS each.
RESULTS=$OUT/results.tsv
printf 'scenario\tround\tdut\tmrr_mpps\tpdr_mpps\tviolations\tp50_us\tp99_us\n' > "$RESULTS"
scenario() {
    local name=$1 mode=$2; shift 2
    case " $SCENARIOS " in *" $name "*) ;; *) echo "bench/run.sh: $name is missing from SCENARIOS" >&2; exit 1 ;; esac
    case ",$ONLY," in ",,"|*",$name,"*) ;; *) return 0 ;; esac
    for r in $(seq 1 "$ROUNDS"); do
        measure "$name" "$r" testpmd reflect "$@"
        measure "$name" "$r" "lbd-$mode" "$mode" "$@"
    done
}

# Flows: clients x ports. 1k = 16 x 64; 1M = 16 x 64,000 (1,024,000);
# new flows cycle through 256 x 64,000 tuples, more than lbd tracks, so
# every SYN is a new connection.
scenario est-1k-64-fullnat fullnat --traffic established --clients 16 --ports 64 --size 64
scenario est-1m-64-fullnat fullnat --traffic established --clients 16 --ports 64000 --size 64
scenario est-1k-512-fullnat fullnat --traffic established --clients 16 --ports 64 --size 512
scenario est-1k-64-dnat dnat --traffic established --clients 16 --ports 64 --size 64
scenario est-1m-64-dnat dnat --traffic established --clients 16 --ports 64000 --size 64
scenario new-64-fullnat fullnat --traffic new --clients 256 --ports 64000 --size 64
scenario new-64-dnat dnat --traffic new --clients 256 --ports 64000 --size 64

# Churn: lbd only, established full-NAT at a fixed rate, deep memif rings,
# one backend toggled between maintenance and active 100 times a second for
# the whole run. On two CPUs every toggle's ring build on lbd's control
# thread takes CPU time from the worker or the generator (1-1.5 ms a build
# on a slow core), and a ring of 1,024 slots holds ~2.5 ms of this run's
# 0.4 Mpps through the link: 16,384 slots (rsize 14) on both sides ride the
# stalls out. The generator's rsize is the one that counts (see gen).
CHURN_OK=skipped
case ",$ONLY," in ",,"|*",churn,"*)
    tag=churn
    start_dut lbd-fullnat "$OUT/$tag.dut.log" 14
    taskset -c "$GEN_CPU" "$GEN" churn --server "$RUN/lbd.sock" --backend 10.0.1.3:8080 --rate 100 \
        --seconds "$((CHURN_SECONDS + WARMUP + 2))" > "$OUT/$tag.churn.log" 2>&1 &
    churn_pid=$!
    gen_ok=1
    client_ok=1
    GEN_SECONDS=$CHURN_SECONDS GEN_RSIZE=14 gen churn fullnat "$OUT/$tag.json" "$OUT/$tag.gen.log" \
        --traffic established --clients 16 --ports 64 --size 64 --rate "$CHURN_RATE_MPPS" || gen_ok=0
    wait "$churn_pid" || { client_ok=0; echo "bench: churn: the gRPC client failed:"; tail -3 "$OUT/$tag.churn.log"; }
    churn_pid=
    stop_dut
    gen_finish || gen_ok=0
    [ "$gen_ok" = 1 ] || { echo "bench: churn: lb-bench failed:"; tail -5 "$OUT/$tag.gen.log"; }
    echo "bench: churn: $(gen_summary "$OUT/$tag.gen.log")"
    echo "bench: churn: $(tail -1 "$OUT/$tag.churn.log")"
    CHURN_OK=$(python3 - "$OUT/$tag.json" "$CHURN_RATE_MPPS" "$(tail -1 "$OUT/$tag.churn.log")" "$client_ok" \
        "$gen_ok" "$OUT/$tag.gen.log" <<'EOF'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("FAIL (no result)")
    sys.exit()
c = s["counters"]
# Per direction, clamped: a packet of the warm-up that arrives in the
# measured period counts as received but not as sent, and must not cancel
# a packet really lost in the other direction.
lost = max(0, c["tx_forward"] - c["rx_forward"]) + max(0, c["tx_reply"] - c["rx_reply"])
why = []
# Without the client's toggles nothing was churned: not a pass.
if sys.argv[4] != "1":
    why.append("the gRPC client failed")
if sys.argv[5] != "1":
    why.append("lb-bench failed")
# Nothing sent loses nothing: a device that never answered ARP (every flow
# unresolved) must not pass. At least half the offered clients' packets,
# and replies.
offered = float(sys.argv[2]) * 1e6 * s["seconds"]
if c["tx_forward"] < 0.5 * offered:
    why.append(f"only {c['tx_forward']} of ~{offered:.0f} packets sent")
if c["rx_reply"] == 0:
    why.append("no reply received")
if "never reached a backend" in open(sys.argv[6], errors="replace").read():
    why.append("some flows never reached a backend")
verdict = "pass" if lost == 0 and s["violations"] == 0 and not why else "FAIL"
print(f"{verdict}: {sys.argv[2]} Mpps of clients over {s['seconds']:.1f} s, {lost} lost, "
      f"{s['violations']} violations, RTT p50/p99 {s['latency_us']['p50']:.0f}/{s['latency_us']['p99']:.0f} us ({sys.argv[3]})"
      + (f"; {'; '.join(why)}" if why else ""))
EOF
)
;; esac

# The table: medians per scenario and device, ratio lbd/baseline.
python3 - "$RESULTS" "$CHURN_OK" "$PDR_LOSS" <<'EOF' | tee "$OUT/table.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by = {}
for r in rows:
    by.setdefault(r["scenario"], {}).setdefault(r["dut"], []).append(r)
def med(d, dut, k):
    xs = [float(x[k]) for x in d.get(dut, [])]
    return statistics.median(xs) if xs else float("nan")
def ratio(a, b):
    return f"{a / b * 100:.0f}%" if b > 0 else "-"
loss = float(sys.argv[3]) * 100
print(f"Mpps through the device, both directions; PDR: highest rate with loss <= {loss:g}%; "
      "MRR: received under overload. Medians over the rounds; lbd's runs listed.\n")
print("| scenario | baseline PDR | lbd PDR | lbd/baseline PDR | lbd PDR runs | baseline MRR | lbd MRR | lbd/baseline MRR | lbd violations | lbd RTT p50/p99 at PDR (us) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for name, d in by.items():
    bp, lp = med(d, "testpmd", "pdr_mpps"), med(d, "lbd", "pdr_mpps")
    bm, lm = med(d, "testpmd", "mrr_mpps"), med(d, "lbd", "mrr_mpps")
    runs = " ".join(f'{float(x["pdr_mpps"]):.2f}' for x in d.get("lbd", []))
    viol = sum(int(x["violations"]) for x in d.get("lbd", []))
    print(f"| {name} | {bp:.2f} | {lp:.2f} | {ratio(lp, bp)} | {runs} | {bm:.2f} | {lm:.2f} | {ratio(lm, bm)} | "
          f"{viol} | {med(d, 'lbd', 'p50_us'):.0f}/{med(d, 'lbd', 'p99_us'):.0f} |")
# On a shared machine a neighbour can slow a whole trial: ratios of rounds
# run back to back (each baseline round and the lbd round after it), and
# of each device's best round (what it does when it has the cores), are
# less exposed to that than ratios of medians. Shown beside them.
print("\n| scenario | lbd/baseline MRR, round by round | lbd/baseline PDR, round by round | best lbd / best baseline MRR | best lbd / best baseline PDR |")
print("|---|---|---|---|---|")
for name, d in by.items():
    b = {x["round"]: x for x in d.get("testpmd", [])}
    l = {x["round"]: x for x in d.get("lbd", [])}
    both = [r for r in b if r in l]
    def paired(k):
        return " ".join(ratio(float(l[r][k]), float(b[r][k])) for r in both) or "-"
    def best(dut, k):
        return max((float(x[k]) for x in d.get(dut, [])), default=float("nan"))
    print(f"| {name} | {paired('mrr_mpps')} | {paired('pdr_mpps')} | "
          f"{ratio(best('lbd', 'mrr_mpps'), best('testpmd', 'mrr_mpps'))} | "
          f"{ratio(best('lbd', 'pdr_mpps'), best('testpmd', 'pdr_mpps'))} |")
# The baseline does the same work every round: rounds that differ much mean
# the machine (or its host) was busy, and ratios from such a run mislead.
SPREAD = 1.15
# MRR, not PDR: a PDR comes out of a bisection whose steps and lossy trials
# make it vary on a quiet machine too.
# lbd's rounds repeat the same traffic too: a spread there alone means the
# machine was busy while lbd ran (its rounds alternate with the
# baseline's, so the baseline can be steady while lbd's are not).
for name, d in by.items():
    for dut, who in (("testpmd", "the baseline's"), ("lbd", "lbd's")):
        xs = [float(x["mrr_mpps"]) for x in d.get(dut, [])]
        if len(xs) > 1 and min(xs) > 0 and max(xs) / min(xs) > SPREAD:
            print(f"\nwarning: {name}: {who} MRR rounds spread {min(xs):.2f}-{max(xs):.2f} Mpps "
                  f"(more than {SPREAD - 1:.0%}): the machine was busy; do not read ratios from this run")
print(f"\nchurn (one backend of the service toggled 100 times a second): {sys.argv[2]}")
EOF
echo "bench: results in $OUT"
[ -z "$DUT_FAILED" ] || { echo "bench: a device did not exit cleanly:$DUT_FAILED" >&2; exit 1; }
case $CHURN_OK in
    FAIL*) echo "bench: churn failed: $CHURN_OK" >&2; exit 1 ;;
esac
