#!/bin/sh
# ci-gate.sh — a ready example of a CI memory gate with poolscope.
#
#   scripts/ci-gate.sh BASELINE.json -- CMD [ARGS...]
#
# Records CMD, prints the report, and fails the job (exit 1) when memory
# behaviour regressed against BASELINE.json (a `poolscope report --json`
# of a known-good run, committed to the repository). Refresh the baseline
# on purpose with:  poolscope report good.pst --json > BASELINE.json
#
# Tolerances: edit the GATE_ARGS below or pass them in the environment, e.g.
#   GATE_ARGS="--tol peak_live_bytes=5 --max leaked_bytes=0" scripts/ci-gate.sh base.json -- ./app
# Exit: 0 pass, 1 regression, 2 bad usage or input.
set -u
POOLSCOPE=${POOLSCOPE:-build/bin/poolscope}
[ $# -ge 3 ] && [ "$2" = "--" ] || { echo "usage: $0 BASELINE.json -- CMD [ARGS...]" >&2; exit 2; }
base=$1; shift 2
[ -r "$base" ] || { echo "ci-gate: $base: cannot read the baseline" >&2; exit 2; }
out=${CI_GATE_DIR:-$(mktemp -d)}
mkdir -p "$out"
trace=$out/run.pst
rm -f "$trace"
"$POOLSCOPE" record -o "$trace" -- "$@" || { echo "ci-gate: the program under test failed" >&2; exit 2; }
"$POOLSCOPE" report "$trace" --top 5
"$POOLSCOPE" report "$trace" --json > "$out/report.json"      # keep as a CI artifact
: "${GATE_ARGS:=--tol peak_live_bytes=5 --tol total_allocated_bytes=10 --tol leaked_bytes=0 --tol pool.hit_rate=2 --tol allocs_per_decode_step=10}"
# shellcheck disable=SC2086
"$POOLSCOPE" gate "$trace" --baseline "$base" $GATE_ARGS
rc=$?
[ $rc -eq 1 ] && "$POOLSCOPE" diff "$base" "$out/report.json"
exit $rc
