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
# PEER_KIT (path to run.sh), PGL_COMPARE_ROUNDS (default 3: rounds of pgl and pmemobj in
# turn, size by size, so that a slow phase of a shared machine hits both sides of a figure;
# each ns figure is the median of its rounds, each ratio the median of the rounds' own
# ratios, pgl's figure over the peer's of the same round). Output: the combined CSV on
# stdout (every round), then
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

# Size by size within each round: the two sides of one figure run seconds apart, not the
# whole matrix apart, so a slow phase of the machine (this one's last minutes) hits both.
for r in $(seq "$rounds"); do
	for z in $sizes; do
		echo "[compare] round $r of $rounds, $z B" >&2
		mkdir -p "$out/r$r.s$z"
		in_rounds "$out/r$r.s$z" 1 \
			"cd $(q "$here") && PGL_BENCH_N=$n PGL_BENCH_RUNS=$runs PGL_BENCH_SIZES=$z \
				PGL_BENCH_THREADS=$(q "$threads") PGL_BENCH_CONFIGS=$(q "$configs") \
				PGL_BENCH_DIR=$(q "$dir") cargo bench --bench micro -q" \
			"PEER_SUITES=fig3 PEER_N=$n PEER_RUNS=$runs PEER_SIZES=$z \
				PEER_THREADS=$(q "$threads") PEER_DIR=$(q "$dir") bash $(q "$kit")"
	done
done

for f in pgl pmdk; do
	head -n 1 "$out/r1.s${sizes%% *}/$f.csv"
	for r in $(seq "$rounds"); do
		for z in $sizes; do tail -n +2 "$out/r$r.s$z/$f.csv"; done
	done
done | awk 'NR == 1 || !/^suite,/'
echo
echo "(pgl and pmemobj in turn, size by size, $rounds rounds: ns are medians of the rounds;"
echo " ratios are medians of each round's ratio, pgl's figure over the peer's of that round)"

python3 - "$out" "$rounds" "$sizes" <<'PY'
import csv, statistics, sys
out, rounds, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
runs = {}  # key -> {round: ns}
for r in range(1, rounds + 1):
    for z in sizes:
        for f in ("pgl", "pmdk"):
            for row in csv.DictReader(open(f"{out}/r{r}.s{z}/{f}.csv")):
                config = row["config"] if row["system"] == "pgl" else ""
                key = (row["bench"], row["system"], config, row["size"], row["threads"])
                runs.setdefault(key, {})[r] = float(row["ns_per_op"])
rows = {k: statistics.median(v.values()) for k, v in runs.items()}

def ratio(num, den):
    """Median over the rounds of num's figure over den's, both of the same round."""
    a, b = runs.get(num), runs.get(den)
    if not a or not b:
        return None
    both = [a[r] / b[r] for r in a if r in b]
    return statistics.median(both) if both else None

order = {"pangolin": 0, "ML": 1, "MLP": 2, "MLC": 3, "MLPC": 4}
keys = sorted({(b, c, z, t) for (b, sy, c, z, t) in rows if sy == "pgl"},
              key=lambda k: (k[0], int(k[2]), int(k[3]), order.get(k[1], 9)))
print("\n| bench | size | threads | config | pgl ns | pmemobj ns | pgl/pmemobj | pmemobj-R ns | pgl/pmemobj-R | floor ns | floor/pmemobj |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for b, c, z, t in keys:
    me = (b, "pgl", c, z, t)
    obj, rep = (b, "pmemobj", "", z, t), (b, "pmemobj-R", "", z, t)
    floor = next((k for k in rows if k[0] == b and k[1] == "floor" and k[3] == z and k[4] == t), None)
    fmt = lambda k: f"{rows[k]:.0f}" if k in rows else "-"
    rat = lambda v: f"{v:.2f}" if v is not None else "-"
    print(f"| {b} | {z} | {t} | {c} | {fmt(me)} | {fmt(obj)} | {rat(ratio(me, obj))} | {fmt(rep)} | "
          f"{rat(ratio(me, rep))} | {fmt(floor) if floor else '-'} | {rat(ratio(floor, obj)) if floor else '-'} |")
PY
