#!/bin/sh
# replay.sh — `poolscope replay` on real engine traces.
#
#  1. The pool prediction is exact: the engine run with --alloc malloc under
#     the tracer (its trace must hold tensor events and no pool events) and
#     replayed with --policy pool gives exactly the hits, misses, backing
#     allocations, buffers destroyed over the cap, peak cached and peak
#     outstanding bytes that the engine's real pool reports for the same
#     workload with --alloc pool — for a sweep of caps, some small enough to
#     destroy buffers.
#  2. The arena policy's peak equals the engine's own --alloc arena capacity.
#  3. Layers 2, 4, 8: the arena's peak grows with the layers, the pool's does
#     not; with --with-kv the KV blocks are arena lifetime violations.
#  4. ShareGPT-shaped requests on a long-context (2048) model: kv-contiguous
#     wastes most of its reservation, kv-paged under 4%.
#  5. Determinism, and bad input: one line, exit 2.
#  6. The malloc policy's helper.
#  7. What applies: `--policy all` (and no --policy) on a heap-only trace
#     runs the four heap policies and names each KV policy it skipped, in
#     the table and in --json, exit 0; a KV policy named on its own is
#     still exit 2; on an engine trace all eight run and none is skipped.
. tests/integration/lib.sh
PS=$BIN/poolscope
ENG=$BIN/refengine
DUMP=$PROGS/pstdump

if ! $PS help replay >/dev/null 2>&1 || $PS replay 2>&1 | grep -q 'not implemented'; then
    echo "not ok replay_wired (poolscope replay is not in the command table)"
    exit 1
fi

MODEL="--synthetic dim=64,layers=2,heads=4,kv_heads=4,hidden=172,vocab=512,seq=256"
WL="--workload sharegpt --requests 12 --max-batch 4 --seed 7"

# json FILE PATH: a value out of a JSON document (python3 is a project dependency)
json() {
    python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    d = d[int(k)] if isinstance(d, list) else d[k]
print(d)' "$1" "$2"
}
# policy FILE NAME KEY: a key of one policy of a replay --json
policy() {
    python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
p=[x for x in d["policies"] if x["name"]==sys.argv[2]][0]
print(p[sys.argv[3]])' "$1" "$2" "$3"
}

# ---- 1. pool exactness ------------------------------------------------------
$PS record -o "$T/m.pst" -- $ENG $MODEL $WL --alloc malloc --quiet >/dev/null 2>"$T/rec.err"
check record_malloc_trace test -s "$T/m.pst"
$DUMP "$T/m.pst" >"$T/dump.txt"
no_pool_events() {
    grep -q '^tensor_acquire=[1-9]' "$T/dump.txt" &&
        ! grep -Eq '^pool_(create|acquire|reclaim|backing_alloc|backing_free)=[1-9]' "$T/dump.txt"
}
check malloc_trace_has_tensors_and_no_pool_events no_pool_events

destroyed_any=0
for cap in 4096 65536 262144 1048576 1GiB; do
    $ENG $MODEL $WL --alloc pool --pool-cap $cap --json --quiet >"$T/eng.json"
    $PS replay "$T/m.pst" --policy pool --pool-cap $cap --json >"$T/rp.json"
    same() {   # one python run per cap: the machine may be loaded and python starts slowly
        python3 -c 'import json,sys
e=json.load(open(sys.argv[1]))["stats"]["bufpool"]
r=[x for x in json.load(open(sys.argv[2]))["policies"] if x["name"]=="pool"][0]
bad=[(k,e[k],r[k]) for k in ("hits","misses","backing_allocs","destroyed_over_cap","peak_cached_bytes","peak_outstanding_bytes") if e[k]!=r[k]]
for b in bad: print("# cap %s: %s engine %s replay %s" % ((sys.argv[3],)+b))
open(sys.argv[4],"w").write(str(e["destroyed_over_cap"]))
sys.exit(1 if bad else 0)' "$T/eng.json" "$T/rp.json" $cap "$T/destroyed"
    }
    check "pool_prediction_exact_cap_$cap" same
    [ "$(cat "$T/destroyed" 2>/dev/null)" -gt 0 ] 2>/dev/null && destroyed_any=1
done
check sweep_includes_caps_that_destroy test $destroyed_any = 1

# ---- 2. arena against the engine's arena --------------------------------------
$ENG $MODEL $WL --alloc arena --json --quiet >"$T/arena.json"
$PS replay "$T/m.pst" --policy arena --json >"$T/rpa.json"
set -- $(python3 -c 'import json,sys
a=[x for x in json.load(open(sys.argv[2]))["policies"] if x["name"]=="arena"][0]
print(json.load(open(sys.argv[1]))["stats"]["alloc"]["arena_capacity"], a["peak_reserved_bytes"], a["lifetime_violations"])' "$T/arena.json" "$T/rpa.json")
check arena_peak_equals_engine_arena_capacity test "$1" = "$2"
check arena_no_violations_without_kv test "$3" = 0

# ---- 3. layers ------------------------------------------------------------------
prev_arena=0 pool_ref=""
grows=1 flat=1 kv_viol=1
for L in 2 4 8; do
    $PS record -o "$T/l$L.pst" -- $ENG --synthetic dim=64,layers=$L,heads=4,kv_heads=4,hidden=172,vocab=512,seq=256 \
        --workload fixed:32,8 --requests 4 --alloc malloc --quiet >/dev/null 2>&1
    $PS replay "$T/l$L.pst" --policy pool,arena --json >"$T/l$L.json"
    $PS replay "$T/l$L.pst" --policy arena --with-kv --json >"$T/l${L}kv.json"
    set -- $(python3 -c 'import json,sys
d={x["name"]:x for x in json.load(open(sys.argv[1]))["policies"]}
k={x["name"]:x for x in json.load(open(sys.argv[2]))["policies"]}
print(d["arena"]["peak_reserved_bytes"], d["pool"]["peak_reserved_bytes"], k["arena"]["lifetime_violations"])' "$T/l$L.json" "$T/l${L}kv.json")
    a=$1 p=$2 v=$3
    echo "# layers $L: arena peak $a, pool peak $p, arena --with-kv violations $v"
    [ "$a" -gt "$prev_arena" ] || grows=0
    [ -z "$pool_ref" ] && pool_ref=$p
    [ "$p" = "$pool_ref" ] || flat=0
    [ "$v" -gt 0 ] || kv_viol=0
    prev_arena=$a
done
check arena_peak_grows_with_layers test $grows = 1
check pool_peak_independent_of_layers test $flat = 1
check with_kv_blocks_are_arena_violations test $kv_viol = 1

# ---- 4. KV on the long-context shape ------------------------------------------------
# (the engine's own --json, with the block pool's peak, comes out of the same run)
$PS record -o "$T/kv.pst" -- $ENG --synthetic dim=32,layers=1,heads=2,kv_heads=2,hidden=64,vocab=256,seq=2048 \
    --workload sharegpt --requests 20 --max-batch 8 --seed 3 --alloc malloc --json --quiet >"$T/kveng.json" 2>/dev/null
$PS replay "$T/kv.pst" --policy kv --kv-context 2048 --json >"$T/kv.json"
kv_check() {
    python3 -c 'import json,sys
w={x["name"]:x["kv_waste_ratio"] for x in json.load(open(sys.argv[1]))["policies"]}
for n in ("kv-contiguous","kv-reserve","kv-step","kv-paged"): print("# %s kv_waste_ratio %.4f" % (n, w[n]))
pk=[x for x in json.load(open(sys.argv[1]))["policies"] if x["name"]=="kv-paged"][0]["peak_kv_reserved_tokens"]
bp=json.load(open(sys.argv[2]))["stats"]["blockpool"]
res={"kv_contiguous_wastes_most": w["kv-contiguous"] > 0.5,
     "kv_paged_wastes_under_4pct": w["kv-paged"] < 0.04,
     "kv_reserve_and_step_in_between": w["kv-paged"] < w["kv-reserve"] < w["kv-contiguous"] and w["kv-paged"] < w["kv-step"],
     # kv-paged at the engine block size holds what the block pool held
     "kv_paged_peak_equals_block_pool_peak": pk == bp["peak_blocks_in_use"] * bp["block_size"]}
for k,v in res.items(): print(("ok " if v else "not ok ") + k)
sys.exit(0 if all(res.values()) else 1)' "$T/kv.json" "$T/kveng.json"
}
kv_check || status=1

# ---- 5. determinism and bad input ---------------------------------------------------
strip() { grep -v '"seconds"\|"events_per_s"\|"read_seconds"\|"ns_per_op"' "$1"; }
$PS replay "$T/m.pst" --policy pool,arena,ideal,kv --json >"$T/d1.json"
$PS replay "$T/m.pst" --policy pool,arena,ideal,kv --json >"$T/d2.json"
strip "$T/d1.json" >"$T/d1s"; strip "$T/d2.json" >"$T/d2s"
check deterministic cmp -s "$T/d1s" "$T/d2s"

bad() { # name expected-substring cmd...
    n=$1 want=$2; shift 2
    "$@" >"$T/bad.out" 2>"$T/bad.err"; rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$T/bad.err")" -eq 1 ] && grep -q "^poolscope replay: .*$want" "$T/bad.err" &&
        [ ! -s "$T/bad.out" ]; then echo "ok $n"; else echo "not ok $n (rc $rc: $(cat "$T/bad.err"))"; status=1; fi
}
head -c 3000 "$T/m.pst" >"$T/cut.pst"
cp "$T/m.pst" "$T/corrupt.pst"
printf '\377\377\377\377' | dd of="$T/corrupt.pst" bs=1 seek=5000 conv=notrunc 2>/dev/null
echo "not a trace" >"$T/text.pst"
bad bad_truncated "truncated" $PS replay "$T/cut.pst"
bad bad_corrupt "corrupt" $PS replay "$T/corrupt.pst" --policy pool
bad bad_not_a_trace "not a poolscope trace" $PS replay "$T/text.pst"
bad bad_missing "cannot read" $PS replay "$T/nope.pst"
bad bad_unknown_policy "unknown policy 'lru'" $PS replay "$T/m.pst" --policy pool,lru
bad bad_option "unknown option" $PS replay "$T/m.pst" --frobnicate
bad bad_pool_cap "bad value for --pool-cap" $PS replay "$T/m.pst" --pool-cap lots
bad bad_block_size "bad value for --block-size" $PS replay "$T/m.pst" --block-size 0
bad bad_stream "--stream takes" $PS replay "$T/m.pst" --stream both
bad bad_no_file "no trace file" $PS replay --json

# ---- 6. the malloc policy's helper --------------------------------------------------
# poolscope-malloc-helper is found next to the running binary (bin/, built or
# installed); a poolscope elsewhere fails in one line, or finds it through
# POOLSCOPE_MALLOC_HELPER. No binary turns into the helper any more.
case $BIN in /*) HELPER=$BIN/poolscope-malloc-helper ;; *) HELPER=$PWD/$BIN/poolscope-malloc-helper ;; esac
mkdir -p "$T/alone" && cp "$PS" "$T/alone/poolscope"
helper_next_to_binary() {
    env -u POOLSCOPE_MALLOC_HELPER $PS replay "$T/m.pst" --policy malloc --json >"$T/hm.json" &&
        [ "$(policy "$T/hm.json" malloc allocator)" = glibc ] &&
        [ "$(policy "$T/hm.json" malloc peak_reserved_bytes)" -gt 0 ]
}
check malloc_helper_found_next_to_binary helper_next_to_binary
helper_missing() {
    env -u POOLSCOPE_MALLOC_HELPER "$T/alone/poolscope" replay "$T/m.pst" --policy malloc \
        >"$T/hx.out" 2>"$T/hx.err"
    rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$T/hx.err")" -eq 1 ] && grep -q 'malloc: cannot start' "$T/hx.err" ||
        { echo "  rc $rc: $(cat "$T/hx.err")" >&2; return 1; }
}
check malloc_helper_missing_one_line helper_missing
helper_override() {
    POOLSCOPE_MALLOC_HELPER=$HELPER "$T/alone/poolscope" replay "$T/m.pst" --policy malloc --json \
        >"$T/ho.json" && [ "$(policy "$T/ho.json" malloc peak_reserved_bytes)" -gt 0 ]
}
check malloc_helper_env_override helper_override
no_constructor() {
    # the old entry point took over any binary that saw these two variables
    out=$(POOLSCOPE_REPLAY_MALLOC_FD=0 POOLSCOPE_REPLAY_MALLOC_BATCH=16 $PS --version </dev/null) &&
        echo "$out" | grep -q '^poolscope [0-9]'
}
check no_binary_becomes_the_helper no_constructor
check helper_alone_is_a_usage_error sh -c "'$HELPER' >/dev/null 2>&1; [ \$? -eq 2 ]"

# ---- 7. what applies ----------------------------------------------------------------
$PS record -o "$T/ls.pst" -- ls / >/dev/null 2>&1
check record_heap_only_trace test -s "$T/ls.pst"
KVPOL="kv-contiguous kv-reserve kv-step kv-paged"
for sel in "--policy all" ""; do
    n=${sel:+all}; n=${n:-default}
    $PS replay "$T/ls.pst" $sel >"$T/sk.txt" 2>"$T/sk.err"; rc=$?
    check "heap_only_${n}_exits_0" test $rc = 0
    check "heap_only_${n}_no_stderr" test ! -s "$T/sk.err"
    names_each() {
        for p in $KVPOL; do
            grep -qx "skipped $p: the trace has no KV block events" "$T/sk.txt" ||
                { echo "  no skip line for $p in: $(grep skipped "$T/sk.txt")" >&2; return 1; }
        done
    }
    check "heap_only_${n}_names_each_kv_policy_skipped" names_each
    check "heap_only_${n}_four_skip_lines" test "$(grep -c '^skipped ' "$T/sk.txt")" = 4
    check "heap_only_${n}_ran_heap_policies" sh -c "grep -q '^arena ' '$T/sk.txt' && grep -q '^pool ' '$T/sk.txt' && grep -q '^ideal ' '$T/sk.txt'"
done
$PS replay "$T/ls.pst" --policy all --json >"$T/sk.json"; rc=$?
skipped_json() {
    python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
ran=[p["name"] for p in d["policies"]]
sk=[(s["policy"], s["reason"]) for s in d["skipped"]]
want=[(p, "the trace has no KV block events") for p in sys.argv[2].split()]
if sk != want or not {"arena","pool","ideal"} <= set(ran) or set(ran) & set(sys.argv[2].split()):
    print("  ran %s, skipped %s" % (ran, sk), file=sys.stderr); sys.exit(1)' "$T/sk.json" "$KVPOL"
}
check heap_only_all_json_exits_0 test $rc = 0
check heap_only_all_json_skipped_array skipped_json
bad named_kv_contiguous_still_exit_2 "kv-contiguous needs --kv-context N: the trace has no request markers" \
    $PS replay "$T/ls.pst" --policy kv-contiguous
bad named_kv_paged_exit_2 "kv-paged: the trace has no KV block events" $PS replay "$T/ls.pst" --policy kv-paged
bad kv_set_none_applies_exit_2 "no selected policy applies" $PS replay "$T/ls.pst" --policy kv
$PS replay "$T/m.pst" --policy all --json >"$T/all.json"; rc=$?
all_eight() {
    python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
ran=[p["name"] for p in d["policies"]]
want=["malloc","arena","pool","ideal","kv-contiguous","kv-reserve","kv-step","kv-paged"]
if ran != want or d["skipped"]:
    print("  ran %s, skipped %s" % (ran, d["skipped"]), file=sys.stderr); sys.exit(1)' "$T/all.json"
}
check engine_trace_all_exits_0 test $rc = 0
check engine_trace_all_runs_eight_policies_no_skips all_eight
check engine_trace_table_has_no_skip_line sh -c "! $PS replay '$T/m.pst' --policy all | grep -q '^skipped'"
exit $status
