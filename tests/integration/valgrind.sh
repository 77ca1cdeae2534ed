# valgrind.sh — memcheck finds no error and no definite leak in refengine
# (a tiny shape, pool and arena modes), in `poolscope report` and
# `poolscope replay` of a small recorded trace, and in the preload library
# running inside small programs. Under valgrind memcheck replaces malloc
# itself, so the preloaded trace is partial there: for the preload only the
# exit status, the program's output and the event API's events (which do not
# go through malloc) are checked.
. tests/integration/lib.sh
PRE=$B/lib/libpoolscope-preload.so
ENG="--synthetic dim=64,layers=2,heads=4,kv_heads=2,hidden=128,vocab=256,seq=64 --workload fixed:8,8 --requests 4 --max-batch 2 --quiet"

if ! command -v valgrind >/dev/null 2>&1; then
    echo "  valgrind is not installed (make deps installs it)" >&2
    echo "not ok valgrind_installed"
    exit 1
fi

# vg NAME CMD...: memcheck clean (exit 99 on any error or definite leak);
# stdout in $T/NAME.out, valgrind's and the program's stderr in $T/NAME.err
vg() {
    vn=$1; shift
    valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite -q "$@" \
        >"$T/$vn.out" 2>"$T/$vn.err"
    rc=$?
    [ $rc -eq 0 ] || { echo "  $vn: exit $rc" >&2; grep -m 30 '^==' "$T/$vn.err" >&2; return 1; }
}

# ---- refengine ----
# shellcheck disable=SC2086
check vg_refengine_pool vg eng_pool "$B/bin/refengine" $ENG --alloc pool
# shellcheck disable=SC2086
check vg_refengine_arena vg eng_arena "$B/bin/refengine" $ENG --alloc arena

# ---- report and replay of a small trace (recorded without valgrind, with stacks) ----
rec() {
    # shellcheck disable=SC2086
    (cd "$T" && "$PS" record --stacks fp -o "$T/eng.pst" -- "$B/bin/refengine" $ENG) \
        >/dev/null 2>"$T/rec.err" || { cat "$T/rec.err" >&2; return 1; }
    "$DUMP" "$T/eng.pst" >"$T/eng.dump" && [ "$(key "$T/eng.dump" complete)" = 1 ] &&
        [ "$(key "$T/eng.dump" tensor_acquire)" -gt 0 ]
}
check record_small_engine_trace rec
check vg_report vg report "$PS" report "$T/eng.pst"
check vg_report_json vg report_json "$PS" report --json "$T/eng.pst"
check vg_replay vg replay "$PS" replay "$T/eng.pst" --policy arena,pool,ideal
# what valgrind ran produced the real output
check vg_report_output sh -c "grep -q 'peak live heap' '$T/report.out' && grep -q '\"peak_live_bytes\"' '$T/report_json.out' &&
    grep -q '^arena ' '$T/replay.out' && grep -q '^pool ' '$T/replay.out' && grep -q '^ideal ' '$T/replay.out'"

# ---- the preload library inside programs run by valgrind ----
# `env` runs under valgrind too (--trace-children) and sets LD_PRELOAD for
# the program only, not for the valgrind launcher.
preload_vg() { # NAME PROG ARGS...
    n=$1; shift
    mkdir -p "$T/$n" &&
        vg "pre_$n" --trace-children=yes env LD_PRELOAD="$PRE" POOLSCOPE_OUT="$T/$n/t.pst" \
            POOLSCOPE_MANIFEST="$T/$n/manifest" "$@" || return 1
    # the program's own trace (with --trace-children, valgrind's launcher
    # re-executed for the program is an image of its own, exe valgrind.bin)
    prog=$(realpath "$1")
    for f in $(cut -f2 "$T/$n/manifest"); do
        "$DUMP" "$f" >"$T/$n.dump" || { echo "  $n: $f unreadable" >&2; return 1; }
        [ "$(key "$T/$n.dump" exe)" = "$prog" ] && return 0
    done
    echo "  $n: no trace of $prog in the manifest" >&2
    return 1
}
churn_vg() {
    preload_vg churn "$P/churn" 20000 && grep -qx 'mallocs=9999 frees=9999' "$T/pre_churn.out"
}
check vg_preload_churn churn_vg
threads_vg() {
    preload_vg threads "$P/threads" 3 4 300 && grep -qx 'threads=12 mallocs=3600' "$T/pre_threads.out"
}
check vg_preload_threads threads_vg
# the event API reaches the tracer under valgrind: its events are all there
markers_vg() {
    preload_vg markers "$P/markers" 5 && grep -qx 'api=1' "$T/pre_markers.out" || return 1
    for k in mark_begin mark_end mark_point tensor_acquire tensor_release; do
        [ "$(key "$T/pre_markers.out" $k)" = "$(key "$T/markers.dump" $k)" ] ||
            { echo "  $k: program $(key "$T/pre_markers.out" $k), trace $(key "$T/markers.dump" $k)" >&2; return 1; }
    done
}
check vg_preload_markers markers_vg
exit $status
