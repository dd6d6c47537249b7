#!/usr/bin/env bash
# compare-log.sh -- run pgl's log benchmark and PMDK's pmemlog (the peer kit's `log` suite)
# in the same script, and print the issue-6 table with ratios to pmemlog.
#
#   benches/compare-log.sh
#   PGL_BENCH_N=20000 PGL_BENCH_RUNS=3 benches/compare-log.sh
#
# Needs ../shared/peers/pmdk/run.sh (PEER_KIT overrides). pmemlog is single-threaded, so
# every pgl row is compared with pmemlog's 1-thread append at the same record size:
#   append      pgl/pmemlog latency ratio (lower is better; target <= 0.65 at 64 B-1 KiB,
#               <= 1.0 at 4 KiB)
#   throughput  pmemlog/pgl = pgl's throughput in multiples of pmemlog's (higher is
#               better; target >= 1.8 for freq-8 on 2 threads)
#   append-floor  the same records' bytes streamed into a ring with one sfence each and
#               nothing else (benches/log.rs, `floor`): floor/pmemlog is the least
#               pgl/pmemlog any log with one ordering point per append can reach here
#   recovery    GB/s of verified records (target >= 1)
# Environment: PGL_BENCH_N (default 100000), PGL_BENCH_RUNS (default 5), PGL_BENCH_SIZES
# (default "64 256 1024 4096"), PGL_BENCH_THREADS (default "1 2 4"), PGL_BENCH_LOG_SIZE
# (throughput record size, default 64), PGL_BENCH_LOG_MIB, PGL_BENCH_DIR (default
# /dev/shm), PEER_KIT, PGL_COMPARE_ROUNDS (default 3: pgl and pmemlog run in turn that
# many times, each figure the median of its rounds). Output: the combined CSV on stdout
# (every round), then a markdown table.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kit=${PEER_KIT:-$here/../shared/peers/pmdk/run.sh}
n=${PGL_BENCH_N:-100000}
runs=${PGL_BENCH_RUNS:-5}
sizes=${PGL_BENCH_SIZES:-64 256 1024 4096}
tsize=${PGL_BENCH_LOG_SIZE:-64}
dir=${PGL_BENCH_DIR:-/dev/shm}
rounds=${PGL_COMPARE_ROUNDS:-3}
out=$(mktemp -d)
# shellcheck source=rounds.sh
source "$here/benches/rounds.sh"
trap 'rm -rf "$out"' EXIT

[[ -x $kit || -f $kit ]] || { echo "peer kit not found at $kit (set PEER_KIT)" >&2; exit 1; }

# pmemlog at every size pgl measures (the throughput size included).
peer_sizes=$(printf '%s\n' $sizes $tsize | sort -nu | tr '\n' ' ')

echo "[compare-log] building pgl's bench" >&2
(cd "$here" && cargo bench --bench log --no-run -q) >&2

in_rounds "$out" "$rounds" \
	"cd $(q "$here") && PGL_BENCH_N=$n PGL_BENCH_RUNS=$runs PGL_BENCH_SIZES=$(q "$sizes") \
		PGL_BENCH_LOG_SIZE=$tsize PGL_BENCH_DIR=$(q "$dir") cargo bench --bench log -q" \
	"PEER_SUITES=log PEER_N=$n PEER_RUNS=$runs PEER_SIZES=$(q "$peer_sizes") \
		PEER_DIR=$(q "$dir") bash $(q "$kit")"

cat "$out/pgl.csv"
tail -n +2 "$out/pmdk.csv"
echo
echo "(medians of $rounds rounds, pgl and pmemlog in turn)"

python3 - "$out/pgl.csv" "$out/pmdk.csv" <<'PY'
import csv, statistics, sys
order, runs, peer_runs = [], {}, {}
for r in csv.DictReader(open(sys.argv[1])):
    key = (r["bench"], r["config"], int(r["size"]), r["threads"])
    if key not in runs:
        order.append(key)
    runs.setdefault(key, []).append(float(r["ns_per_op"]))
for r in csv.DictReader(open(sys.argv[2])):
    if r["suite"] == "log" and r["system"] == "pmemlog":
        peer_runs.setdefault(int(r["size"]), []).append(float(r["ns_per_op"]))
peer = {s: statistics.median(v) for s, v in peer_runs.items()}
pgl = [dict(bench=b, config=c, size=s, threads=t, ns_per_op=statistics.median(runs[(b, c, s, t)]))
       for (b, c, s, t) in order]
print("\n| bench | config | size | threads | pgl ns/op | pmemlog ns/op | ratio |")
print("|---|---|---|---|---|---|---|")
for r in pgl:
    b, c, s, t, v = r["bench"], r["config"], int(r["size"]), r["threads"], float(r["ns_per_op"])
    if b == "recovery":
        print(f"| recovery | {c} | {s >> 20} MiB | {t} | {v / 1e6:.1f} ms | - | {s / v:.2f} GB/s (log bytes / time) |")
        continue
    p = peer.get(s)
    floor = statistics.median(runs[("append-floor", c, s, t)]) if ("append-floor", c, s, t) in runs else None
    if b == "append":
        ratio = f"{v / p:.2f} (pgl/pmemlog latency)" if p else "-"
        if floor:
            ratio += f"; pgl/floor {v / floor:.2f}"
    elif b == "append-floor":
        ratio = f"{v / p:.2f} (floor/pmemlog: no log with one fence per append gets below it)" if p else "-"
    else:
        ratio = f"{p / v:.2f}x pmemlog throughput" if p else "-"
    print(f"| {b} | {c} | {s} | {t} | {v:.0f} | {p:.0f} |" if p else f"| {b} | {c} | {s} | {t} | {v:.0f} | - |", ratio, "|")
PY
