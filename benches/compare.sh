#!/usr/bin/env bash
# compare.sh -- run pgl's fig3 benchmark and PMDK's libpmemobj on the same workload, in the
# same script, and print pgl / pmemobj ratios.
#
#   benches/compare.sh                 # full matrix (a few minutes)
#   PGL_BENCH_N=20000 benches/compare.sh
#
# Needs ../shared/peers/pmdk/run.sh (the peer kit; it installs PMDK's Debian packages).
# Environment: PGL_BENCH_N (ops per thread, default 100000), PGL_BENCH_RUNS (default 5),
# PGL_BENCH_SIZES, PGL_BENCH_THREADS, PGL_BENCH_CONFIGS (pgl's protection configurations,
# default "pangolin ML MLP MLC MLPC"; see benches/micro.rs), PGL_BENCH_DIR (default /dev/shm),
# PEER_KIT (path to run.sh), PGL_COMPARE_ROUNDS (default 3: pgl and pmemobj run in turn
# that many times, and each figure is the median of its rounds, so that a slow phase of a
# shared machine hits both sides). Output: the combined CSV on stdout (every round), then
# a markdown table of ratios, one row per pgl configuration; overwrite rows also give the
# protocol's floor (benches/support/floor.rs: the memory work of a fully protected commit
# alone) and floor/pmemobj, the least pgl/pmemobj any implementation could reach here.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kit=${PEER_KIT:-$here/../shared/peers/pmdk/run.sh}
n=${PGL_BENCH_N:-100000}
runs=${PGL_BENCH_RUNS:-5}
sizes=${PGL_BENCH_SIZES:-64 256 1024 4096}
threads=${PGL_BENCH_THREADS:-1 2}
dir=${PGL_BENCH_DIR:-/dev/shm}
configs=${PGL_BENCH_CONFIGS:-pangolin ML MLP MLC MLPC}
rounds=${PGL_COMPARE_ROUNDS:-3}
out=$(mktemp -d)
# shellcheck source=rounds.sh
source "$here/benches/rounds.sh"
trap 'rm -rf "$out"' EXIT

[[ -x $kit || -f $kit ]] || { echo "peer kit not found at $kit (set PEER_KIT)" >&2; exit 1; }

echo "[compare] building pgl's bench" >&2
(cd "$here" && cargo bench --bench micro --no-run -q) >&2

in_rounds "$out" "$rounds" \
	"cd $(q "$here") && PGL_BENCH_N=$n PGL_BENCH_RUNS=$runs PGL_BENCH_SIZES=$(q "$sizes") \
		PGL_BENCH_THREADS=$(q "$threads") PGL_BENCH_CONFIGS=$(q "$configs") \
		PGL_BENCH_DIR=$(q "$dir") cargo bench --bench micro -q" \
	"PEER_SUITES=fig3 PEER_N=$n PEER_RUNS=$runs PEER_SIZES=$(q "$sizes") \
		PEER_THREADS=$(q "$threads") PEER_DIR=$(q "$dir") bash $(q "$kit")"

cat "$out/pgl.csv"
tail -n +2 "$out/pmdk.csv"
echo
echo "(medians of $rounds rounds, pgl and pmemobj in turn)"

python3 - "$out/pgl.csv" "$out/pmdk.csv" <<'PY'
import csv, statistics, sys
runs = {}
for f in sys.argv[1:]:
    for r in csv.DictReader(open(f)):
        config = r["config"] if r["system"] == "pgl" else ""
        key = (r["bench"], r["system"], config, r["size"], r["threads"])
        runs.setdefault(key, []).append(float(r["ns_per_op"]))
rows = {k: statistics.median(v) for k, v in runs.items()}
floors = {(b, z, t): v for (b, sy, c, z, t), v in rows.items() if sy == "floor"}
order = {"pangolin": 0, "ML": 1, "MLP": 2, "MLC": 3, "MLPC": 4}
keys = sorted({(b, c, z, t) for (b, sy, c, z, t) in rows if sy == "pgl"},
              key=lambda k: (k[0], int(k[2]), int(k[3]), order.get(k[1], 9)))
print("\n| bench | size | threads | config | pgl ns | pmemobj ns | pgl/pmemobj | pmemobj-R ns | pgl/pmemobj-R | floor ns | floor/pmemobj |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for b, c, z, t in keys:
    p = rows[(b, "pgl", c, z, t)]
    o = rows.get((b, "pmemobj", "", z, t))
    r = rows.get((b, "pmemobj-R", "", z, t))
    fmt = lambda v: f"{v:.0f}" if v else "-"
    rat = lambda v: f"{p / v:.2f}" if v else "-"
    f = floors.get((b, z, t))
    fo = f"{f / o:.2f}" if f and o else "-"
    print(f"| {b} | {z} | {t} | {c} | {p:.0f} | {fmt(o)} | {rat(o)} | {fmt(r)} | {rat(r)} | {fmt(f)} | {fo} |")
PY
