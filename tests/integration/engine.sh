# engine.sh — refengine from the outside: option and input errors (exit 2,
# one line), --json and --metrics output, and under the tracer: no heap call
# in steady-state decode steps with --alloc pool (and some with --alloc
# malloc, so the check can fail), one "decode" marker per decode step, and
# the same logical tensor events in every --alloc mode.
. tests/integration/lib.sh
ENG=$BIN/refengine
STEPS=$PROGS/eng_steps
SHAPE=dim=64,layers=2,heads=4,kv_heads=2,hidden=160,vocab=512,seq=128

# rejects ARGS...: exit 2 and exactly one line on stderr naming the problem
rejects() {
    "$ENG" "$@" >"$T/rej.out" 2>"$T/rej.err"
    rc=$?
    [ "$rc" = 2 ] || { echo "  exit $rc for: $*" >&2; return 1; }
    [ "$(wc -l <"$T/rej.err")" = 1 ] || { echo "  stderr not one line: $(cat "$T/rej.err")" >&2; return 1; }
    grep -q '^refengine: ' "$T/rej.err"
}
check rejects_unknown_option rejects --bogus 1
check rejects_bad_alloc rejects --alloc slab
check rejects_bad_shape rejects --synthetic dim=100,heads=3
check rejects_gqa_mismatch rejects --synthetic dim=64,heads=4,kv_heads=3
check rejects_unknown_shape_key rejects --synthetic width=3
check rejects_bad_workload rejects --workload fixed:0,5
check rejects_bad_threads rejects --threads 0
check rejects_non_number rejects --requests many
check rejects_bad_top_p rejects --top-p 1.5
check rejects_missing_value rejects --max-batch
check rejects_missing_checkpoint rejects --checkpoint "$T/nope.bin"
printf 'xyz' >"$T/short.bin"
check rejects_short_checkpoint rejects --checkpoint "$T/short.bin"
# a header whose shape needs far more bytes than the file has
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<7i',64,160,2,4,2,512,128)+b'\0'*1000)" >"$T/trunc.bin"
truncated_named() {
    rejects --checkpoint "$T/trunc.bin" && grep -q "trunc.bin: truncated checkpoint" "$T/rej.err"
}
check rejects_truncated_checkpoint truncated_named
check rejects_request_larger_than_kv_pool rejects --synthetic $SHAPE --workload fixed:40,40 --block-size 8 --kv-blocks 4

# --json: parseable, one entry per request, each with its tokens
json_ok() {
    "$ENG" --synthetic $SHAPE --requests 5 --max-batch 3 --workload alpaca --json \
        --metrics "$T/kv.prom" >"$T/run.json" || return 1
    python3 - "$T/run.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["requests"]
assert len(r) == 5, len(r)
for q in r:
    assert len(q["tokens"]) == q["max_tokens"], q
s = d["stats"]
for k in ("prefill_tok_per_s", "decode_tok_per_s", "weight_passes_per_step", "bufpool", "blockpool"):
    assert k in s, k
assert abs(s["weight_passes_per_step"] - 1.0) < 1e-9
for k in ("acquires", "hits", "misses", "hit_rate", "backing_allocs", "peak_cached_bytes",
          "peak_outstanding_bytes", "internal_frag"):
    assert k in s["bufpool"], k
for k in ("n_blocks", "n_allocations", "n_frees", "n_reused", "n_exhausted", "peak_blocks_in_use"):
    assert k in s["blockpool"], k
assert s["blockpool"]["blocks_in_use"] == 0
EOF
}
check json_output json_ok
check metrics_file grep -q '^poolscope_block_pool_allocations_total ' "$T/kv.prom"

# --pool-cap is the pool's cap, taken literally: 0 caches nothing
pool_cap() {
    "$ENG" --synthetic $SHAPE --requests 2 --workload fixed:4,6 --pool-cap 0 --json >"$T/cap0.json" &&
    "$ENG" --synthetic $SHAPE --requests 2 --workload fixed:4,6 --pool-cap 64MiB --json >"$T/cap64.json" || return 1
    python3 - "$T/cap0.json" "$T/cap64.json" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1]))["stats"]["bufpool"]
b = json.load(open(sys.argv[2]))["stats"]["bufpool"]
assert a["max_cached_bytes"] == 0 and a["hits"] == 0 and a["destroyed_over_cap"] == a["acquires"], a
assert b["max_cached_bytes"] == 64 << 20 and b["hits"] > 0, b
EOF
}
check pool_cap_is_applied pool_cap
check rejects_bad_pool_cap rejects --pool-cap 12XB

# the same tokens whatever the batching, threads, block size and alloc mode
tokens_of() { python3 -c "import json,sys; print([q['tokens'] for q in json.load(open(sys.argv[1]))['requests']])" "$1"; }
same_tokens() {
    "$ENG" --synthetic $SHAPE --requests 6 --max-batch 1 --workload fixed:12,20 --json >"$T/a.json" &&
    "$ENG" --synthetic $SHAPE --requests 6 --max-batch 6 --threads 2 --block-size 3 --alloc arena \
        --workload fixed:12,20 --kv-blocks 24 --json >"$T/b.json" || return 1
    [ "$(tokens_of "$T/a.json")" = "$(tokens_of "$T/b.json")" ] &&
        python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['stats']['preemptions'] > 0" "$T/b.json"
}
check same_tokens_batched_preempted_and_alone same_tokens

# a llama2.c checkpoint (separate classifier) and tokenizer written here
ckpt_and_text() {
    python3 - "$T/m.bin" "$T/tok.bin" <<'EOF2' || return 1
import random, struct, sys
dim, hid, L, H, KV, V, S = 32, 48, 2, 4, 2, 64, 40
hs = dim // H; kvd = KV * hs
n = V*dim + L*dim + L*dim*dim + 2*L*kvd*dim + L*dim*dim + L*dim + 3*L*hid*dim + dim + S*hs + V*dim
rnd = random.Random(5)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<7i", dim, hid, L, H, KV, -V, S))
    f.write(struct.pack("<%df" % n, *[rnd.uniform(-0.3, 0.3) for _ in range(n)]))
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<i", 8))
    for i in range(V):
        p = b"<0x41>" if i == 10 else b" w%d" % i
        f.write(struct.pack("<fi", 0.0, len(p)) + p)
EOF2
    "$ENG" --checkpoint "$T/m.bin" --tokenizer "$T/tok.bin" --requests 3 --workload fixed:5,7 \
        --json >"$T/ck.json" || return 1
    python3 - "$T/ck.json" <<'EOF2'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["model"]["vocab_size"] == 64 and d["model"]["n_kv_heads"] == 2
for q in d["requests"]:
    assert len(q["tokens"]) == 7
    want = "".join("A" if t == 10 else " w%d" % t for t in q["tokens"])
    assert q["text"] == want, (q["text"], want)
EOF2
}
check checkpoint_and_tokenizer_text ckpt_and_text

# under the tracer
traced() { # MODE: record a run (two threads), dump its per-step counts to $T/MODE.steps
    rm -f "$T/$1.pst"
    "$PS" record -o "$T/$1.pst" -- "$ENG" --synthetic $SHAPE --requests 4 --max-batch 4 --threads 2 \
        --workload fixed:8,24 --block-size 4 --alloc "$1" --json >"$T/$1.json" 2>"$T/$1.err" || return 1
    "$STEPS" "$T/$1.pst" >"$T/$1.steps"
}
decode_markers_match() { # MODE
    steps=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['stats']['decode_steps'])" "$T/$1.json")
    [ "$(key "$T/$1.steps" decode_steps)" = "$steps" ] && [ "$(key "$T/$1.steps" decode_ends)" = "$steps" ] &&
        [ "$(key "$T/$1.steps" request_begin)" = 4 ] && [ "$(key "$T/$1.steps" request_end)" = 4 ] &&
        [ "$(key "$T/$1.steps" forward)" = "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['stats']['steps'])" "$T/$1.json")" ] &&
        [ "$(key "$T/$1.steps" lost)" = 0 ]
}
if [ -x "$PS" ] && [ -f "$PRELOAD" ] && [ -x "$STEPS" ]; then
    check traced_pool traced pool
    check traced_malloc traced malloc
    check traced_arena traced arena
    check pool_no_heap_calls_in_steady_decode sh -c "[ \"\$(sed -n 's/^steady_heap_calls=//p' '$T/pool.steps')\" = 0 ] &&
        [ \"\$(sed -n 's/^steady_steps=//p' '$T/pool.steps')\" -gt 10 ]"
    check malloc_heap_calls_in_steady_decode sh -c "[ \"\$(sed -n 's/^steady_heap_calls=//p' '$T/malloc.steps')\" -gt 0 ]"
    check arena_no_heap_calls_in_steady_decode sh -c "[ \"\$(sed -n 's/^steady_heap_calls=//p' '$T/arena.steps')\" = 0 ]"
    check decode_markers_equal_steps_pool decode_markers_match pool
    check decode_markers_equal_steps_malloc decode_markers_match malloc
    check same_tensor_events_every_mode sh -c "a=\$(sed -n 's/^tensor_acquire=//p' '$T/pool.steps');
        [ \"\$a\" -gt 0 ] && [ \"\$a\" = \"\$(sed -n 's/^tensor_acquire=//p' '$T/malloc.steps')\" ] &&
        [ \"\$a\" = \"\$(sed -n 's/^tensor_acquire=//p' '$T/arena.steps')\" ] &&
        [ \"\$a\" = \"\$(sed -n 's/^tensor_release=//p' '$T/pool.steps')\" ]"
    check only_pool_mode_emits_pool_internals sh -c "[ \"\$(sed -n 's/^pool_acquire=//p' '$T/pool.steps')\" -gt 0 ] &&
        [ \"\$(sed -n 's/^pool_acquire=//p' '$T/malloc.steps')\" = 0 ]"
    check kv_block_fill_reported sh -c "[ \"\$(sed -n 's/^kvb_tokens=//p' '$T/pool.steps')\" -gt 0 ]"
else
    check tracer_built false
fi
exit $status
