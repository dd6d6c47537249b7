# rounds.sh -- sourced by compare.sh and compare-log.sh: the peer and pgl in turn.
#
# q WORD: WORD quoted for a shell command line (for building PGL_CMD and PEER_CMD).
q() { printf '%q' "$1"; }

# in_rounds OUT ROUNDS PGL_CMD PEER_CMD: runs `PGL_CMD` then `PEER_CMD` (shell commands
# printing CSV with a header) ROUNDS times, so that a slow phase of a shared machine hits
# both sides, and writes every round's rows under one header to OUT/pgl.csv and
# OUT/pmdk.csv. A failing peer run prints its stderr and exits.
in_rounds() {
	local out=$1 rounds=$2 pgl_cmd=$3 peer_cmd=$4 r
	for r in $(seq "$rounds"); do
		echo "[rounds] $r of $rounds: pgl" >&2
		bash -c "$pgl_cmd" >"$out/pgl.$r.csv" 2>"$out/pgl.err" ||
			{ cat "$out/pgl.err" >&2; exit 1; }
		echo "[rounds] $r of $rounds: peer" >&2
		bash -c "$peer_cmd" >"$out/pmdk.$r.csv" 2>"$out/pmdk.err" ||
			{ cat "$out/pmdk.err" >&2; exit 1; }
	done
	head -n 1 "$out/pgl.1.csv" >"$out/pgl.csv"
	head -n 1 "$out/pmdk.1.csv" >"$out/pmdk.csv"
	for r in $(seq "$rounds"); do
		tail -n +2 "$out/pgl.$r.csv" >>"$out/pgl.csv"
		tail -n +2 "$out/pmdk.$r.csv" >>"$out/pmdk.csv"
	done
}
