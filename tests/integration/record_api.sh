# record_api.sh — the event API from the program's side: a PIE and a non-PIE
# build of the same program find the tracer's table when preloaded (their
# markers, tensor events and thread name are in the trace) and do nothing
# without it; the pool adapter's events rebuild the pools' own statistics.
. tests/integration/lib.sh

# markers NAME EXE: untraced api=0, traced api=1 with its counts in the trace
markers() {
    n=$1 exe=$2
    "$exe" 5 >"$T/$n.plain" && grep -qx 'api=0' "$T/$n.plain" || return 1
    "$PS" record -o "$T/$n.pst" -- "$exe" 5 >"$T/$n.out" 2>"$T/$n.err" || return 1
    grep -qx 'api=1' "$T/$n.out" || { echo "  $n: no tracer table found" >&2; return 1; }
    "$DUMP" "$T/$n.pst" >"$T/$n.dump" || return 1
    grep -v '^api=' "$T/$n.out" >"$T/$n.want"
    same_keys "$T/$n.want" "$T/$n.dump" &&
        [ "$(key "$T/$n.dump" thread_name.markers-main)" = 1 ] &&
        [ "$(key "$T/$n.dump" mark.request)" = 2 ] && [ "$(key "$T/$n.dump" mark.decode)" = 5 ] &&
        [ "$(key "$T/$n.dump" mark.layer)" = 20 ]
}
check markers_pie markers pie "$P/markers"

nopie() {
    cc -std=c11 -D_GNU_SOURCE -O2 -no-pie -fno-pie -I"$ROOT/include" -o "$T/markers-nopie" \
        "$ROOT/tests/progs/markers.c" "$B/lib/libpstrace.a" -ldl -pthread || return 1
    readelf -h "$T/markers-nopie" | grep -q 'Type:.*EXEC' || { echo "  not a non-PIE executable" >&2; return 1; }
    markers nopie "$T/markers-nopie"
}
check markers_non_pie nopie

pool_events() {
    "$PS" record -o "$T/pool.pst" -- "$P/pool_events" 300 >"$T/pool.out" 2>"$T/pool.err" || return 1
    grep -qx 'tracer=1' "$T/pool.out" || return 1
    "$DUMP" "$T/pool.pst" >"$T/pool.dump" || return 1
    grep '^pool\.' "$T/pool.out" >"$T/pool.want"
    [ "$(grep -c . "$T/pool.want")" -ge 20 ] || return 1
    same_keys "$T/pool.want" "$T/pool.dump" &&
        ! grep -q 'seq_disorder=[1-9]' "$T/pool.dump" &&
        [ "$(key "$T/pool.dump" pool_create)" = 1 ] && [ "$(key "$T/pool.dump" kvb_create)" = 2 ] &&
        [ "$(key "$T/pool.dump" pool_destroy)" = 1 ] && [ "$(key "$T/pool.dump" kvb_destroy)" = 2 ]
}
check pool_stats_rebuilt_from_trace pool_events
pool_untraced() {
    "$P/pool_events" 50 >"$T/pu.out" && grep -qx 'tracer=0' "$T/pu.out"
}
check pool_adapter_off_without_tracer pool_untraced
exit $status
