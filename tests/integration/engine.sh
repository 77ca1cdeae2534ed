# engine.sh — refengine from the outside: option and input errors (exit 2,
# one line), --json and --metrics output, and under the tracer: no heap call
# in steady-state decode steps with --alloc pool (and some with --alloc
# malloc, so the check can fail), one "decode" marker per decode step, and
# the same logical tensor events in every --alloc mode. A user's prompt:
# --prompt-ids gives the tokens the C API gives (tests/progs/eng_prompt),
# greedy and seeded, whatever the threads and batching; bad ids refused;
# --prompt encodes as llama2.c's run.c (an independent Python port here);
# the demo's own arguments sample more than one distinct token.
. tests/integration/lib.sh
ENG=$BIN/refengine
STEPS=$PROGS/eng_steps
API=$PROGS/eng_prompt
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

# ---- a user's prompt ----
IDS=1,17,250,3,99,42
# api_vs_cli NAME TEMP TOP_P SAMPLE_SEED REQUESTS MAX_TOKENS CLI-ARGS...: the
# C API's tokens (threads 1, batch 1) equal refengine --prompt-ids' tokens
api_vs_cli() {
    n=$1 temp=$2 topp=$3 sseed=$4 nreq=$5 gen=$6; shift 6
    # shellcheck disable=SC2046
    "$API" $SHAPE 42 "$temp" "$topp" "$sseed" 1 1 "$nreq" "$gen" $(echo $IDS | tr , ' ') >"$T/$n.api" || return 1
    "$ENG" --synthetic $SHAPE --prompt-ids $IDS --requests "$nreq" --max-tokens "$gen" \
        --temperature "$temp" --top-p "$topp" "$@" --json >"$T/$n.json" || return 1
    python3 - "$T/$n.json" "$T/$n.api" "$gen" "$IDS" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
got = ["%d:%s" % (q["id"], "".join(" %d" % t for t in q["tokens"])) for q in d["requests"]]
want = open(sys.argv[2]).read().splitlines()
assert got == want, (got, want)
assert d["prompt"]["tokens"] == [int(x) for x in sys.argv[4].split(",")], d["prompt"]
for q in d["requests"]:
    assert q["prompt_len"] == 6 and q["max_tokens"] == int(sys.argv[3]), q
    assert len(q["tokens"]) == q["max_tokens"] or q["stopped"], q
PY
}
check prompt_ids_equal_api_greedy api_vs_cli g 0 1 42 1 40
check prompt_ids_equal_api_greedy_batched_threads api_vs_cli gb 0 1 42 3 40 --threads 2 --max-batch 3
check prompt_ids_equal_api_sampled api_vs_cli s 8 1 9 4 40 --sample-seed 9
check prompt_ids_equal_api_sampled_threads_2 api_vs_cli s2 8 1 9 4 40 --sample-seed 9 --threads 2 --max-batch 2
check prompt_ids_equal_api_sampled_preempted api_vs_cli sp 8 1 9 4 40 --sample-seed 9 --threads 2 \
    --max-batch 4 --block-size 4 --kv-blocks 14
check prompt_ids_equal_api_top_p api_vs_cli tp 8 0.7 5 3 30 --sample-seed 5 --threads 2 --max-batch 3
# --seed seeds the sampler too when --sample-seed is not given
check prompt_ids_equal_api_seed_is_sample_seed api_vs_cli ss 8 1 42 2 20
sampled_varies() {
    python3 - "$T/g.json" "$T/s.json" "$T/sp.json" <<'PY'
import json, sys
g, s, sp = (json.load(open(f)) for f in sys.argv[1:4])
assert sp["stats"]["preemptions"] > 0, sp["stats"]
toks = [q["tokens"] for q in s["requests"]]
assert toks[0] != g["requests"][0]["tokens"][:len(toks[0])], "sampling gave the greedy tokens"
assert len({tuple(t) for t in toks}) == len(toks), "copies of the prompt sampled alike"
assert all(len(set(t)) > 1 for t in toks), toks
PY
}
check sampled_tokens_vary_and_preempted_run_matches sampled_varies
other_seed_differs() {
    "$ENG" --synthetic $SHAPE --prompt-ids $IDS --requests 4 --max-tokens 40 --temperature 8 \
        --sample-seed 10 --json >"$T/s10.json" &&
        [ "$(tokens_of "$T/s10.json")" != "$(tokens_of "$T/s.json")" ]
}
check another_sample_seed_other_tokens other_seed_differs
# plain output: the prompt, then each request's ids
plain_prompt() {
    "$ENG" --synthetic $SHAPE --prompt-ids 1,5,9 --max-tokens 4 >"$T/plain.txt" || return 1
    sed -n 1p "$T/plain.txt" | grep -qx 'prompt (3 tokens): 1 5 9' &&
        sed -n 2p "$T/plain.txt" | grep -qx 'request 0 (prompt 3, max 4): 9 9 9 9'
}
check prompt_plain_output plain_prompt
# synthetic greedy repeats the last prompt token: a prompt ending in BOS stops at once, as run.c
stop_at_bos() {
    "$ENG" --synthetic $SHAPE --prompt-ids 5,1 --json >"$T/bos.json" || return 1
    python3 -c "import json,sys; q=json.load(open(sys.argv[1]))['requests'][0]; assert q['stopped'] and q['tokens']==[] and q['max_tokens']==126, q" "$T/bos.json"
}
check prompt_stops_at_bos stop_at_bos
default_max_tokens() {
    "$ENG" --synthetic $SHAPE --prompt-ids 2,3 --json >"$T/dm.json" || return 1
    python3 -c "import json,sys; q=json.load(open(sys.argv[1]))['requests']; assert len(q)==1 and q[0]['max_tokens']==126 and len(q[0]['tokens'])==126, q" "$T/dm.json"
}
check prompt_default_one_request_filling_the_context default_max_tokens
# rejects_naming TEXT ARGS...: exit 2, one line, and the line contains TEXT
rejects_naming() {
    want=$1; shift
    rejects "$@" || return 1
    grep -qF -- "$want" "$T/rej.err" || { echo "  no '$want' in: $(cat "$T/rej.err")" >&2; return 1; }
}
check rejects_prompt_id_out_of_vocab rejects_naming "token id 512 (item 3)" --synthetic $SHAPE --prompt-ids 1,2,512
check rejects_prompt_id_negative rejects_naming "token id -3 (item 2)" --synthetic $SHAPE --prompt-ids 1,-3
check rejects_prompt_id_not_a_number rejects_naming "item 2 'x7'" --synthetic $SHAPE --prompt-ids 1,x7,3
check rejects_prompt_id_empty_item rejects_naming "item 2 ''" --synthetic $SHAPE --prompt-ids 1,,3
check rejects_prompt_ids_empty rejects_naming "empty token id list" --synthetic $SHAPE --prompt-ids ""
check rejects_prompt_id_past_32000 rejects_naming "token id 32000 (item 1)" --prompt-ids 32000
check rejects_prompt_too_long rejects_naming "no room" --synthetic dim=64,layers=2,heads=4,kv_heads=2,hidden=160,vocab=512,seq=4 --prompt-ids 1,2,3,4
check rejects_max_tokens_past_context rejects_naming "at most 124" --synthetic $SHAPE --prompt-ids 1,2,3,4 --max-tokens 125
check rejects_prompt_without_tokenizer rejects_naming "--prompt needs --tokenizer" --prompt "Once upon a time"
check rejects_prompt_and_prompt_ids rejects_naming "exclusive" --prompt-ids 1 --prompt x
check rejects_prompt_and_workload rejects_naming "exclusive" --prompt-ids 1 --workload alpaca
check rejects_max_tokens_without_prompt rejects_naming "--max-tokens needs" --max-tokens 5
check rejects_bad_temperature rejects --temperature -1
# the demo's own engine arguments (scripts/demo.sh), fewer requests: sampled,
# every request has more than one distinct token; greedy, exactly one
SHAPE_D= ENGINE_ARGS=
eval "$(grep -E '^(SHAPE|ENGINE_ARGS)=' "$ROOT/scripts/demo.sh" | sed 's/^SHAPE=/SHAPE_D=/; s/\$SHAPE/$SHAPE_D/')"
demo_samples() {
    [ -n "$SHAPE_D" ] && [ -n "$ENGINE_ARGS" ] || { echo "  no SHAPE / ENGINE_ARGS in scripts/demo.sh" >&2; return 1; }
    # shellcheck disable=SC2086
    "$ENG" $ENGINE_ARGS --requests 6 >"$T/demo.json" &&
        "$ENG" $ENGINE_ARGS --requests 6 --temperature 0 >"$T/demo0.json" || return 1
    python3 - "$T/demo.json" "$T/demo0.json" <<'PY'
import json, sys
d, g = (json.load(open(f)) for f in sys.argv[1:])
assert d["config"]["temperature"] > 0, d["config"]
for q in d["requests"]:
    if q["max_tokens"] > 1:
        assert len(set(q["tokens"])) > 1, q
assert all(len(set(q["tokens"])) == 1 for q in g["requests"]), "greedy varies now: revisit the demo's temperature"
n = sum(len(q["tokens"]) for q in d["requests"])
print("  demo-like: %d requests, %d tokens, %d distinct (greedy: %d distinct)" % (
    len(d["requests"]), n, len({t for q in d["requests"] for t in q["tokens"]}),
    len({t for q in g["requests"] for t in q["tokens"]})), file=sys.stderr)
PY
}
check demo_args_sample_more_than_one_token demo_samples

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

# --save-checkpoint writes the model as a llama2.c checkpoint; read back into
# each kind of weight memory it gives the synthetic model's tokens (sampled:
# every logit counts), and --json says which memory and how much of it is in
# 2 MiB pages
check rejects_bad_weights_memory rejects --weights-memory giant
check rejects_mmap_without_checkpoint rejects_naming "needs --checkpoint" --synthetic $SHAPE --weights-memory mmap
saved_same_tokens() {
    "$ENG" --synthetic $SHAPE --seed 9 --save-checkpoint "$T/saved.bin" || return 1
    [ -s "$T/saved.bin" ] || return 1
    "$ENG" --synthetic $SHAPE --seed 9 --requests 3 --workload fixed:6,20 --temperature 1 \
        --sample-seed 4 --json >"$T/syn.json" || return 1
    for mem in huge small mmap; do
        "$ENG" --checkpoint "$T/saved.bin" --weights-memory $mem --requests 3 --workload fixed:6,20 \
            --temperature 1 --sample-seed 4 --seed 9 --json >"$T/ck_$mem.json" || return 1
        [ "$(tokens_of "$T/ck_$mem.json")" = "$(tokens_of "$T/syn.json")" ] ||
            { echo "  $mem: other tokens than the synthetic model" >&2; return 1; }
        python3 - "$T/ck_$mem.json" $mem <<'PY' || return 1
import json, sys
m = json.load(open(sys.argv[1]))["model"]
assert m["weights_memory"] == sys.argv[2], m
assert 0 <= m["weights_huge_page_bytes"], m
if sys.argv[2] == "small":
    assert m["weights_huge_page_bytes"] == 0 and not m["weights_hugetlb"], m
PY
    done
}
check save_checkpoint_reads_back_in_every_memory saved_same_tokens

# --prompt through a tokenizer: the ids of an independent Python port of
# run.c's encode(), on a tokenizer with byte tokens and overlapping pieces
prompt_text() {
    python3 - "$T/tok512.bin" "$T/want.ids" <<'PY' || return 1
import random, struct, sys
rnd = random.Random(3)
words = ["once", "upon", "a", "time", "there", "was", "little", "girl", "named", "lily", "\u00e9t\u00e9"]
pieces = ["<unk>", "\n<s>\n", "\n</s>\n"] + ["<0x%02X>" % b for b in range(256)] + [" "]
subs = sorted({(" " if i == 0 and rnd.random() < .5 else "") + w[i:j]
               for w in words for i in range(len(w)) for j in range(i + 1, len(w) + 1)})
rnd.shuffle(subs)
for p in subs:
    if len(pieces) == 512: break
    if p not in pieces: pieces.append(p)
while len(pieces) < 512: pieces.append("#%d" % len(pieces))
scores = [0.0] * 259 + [rnd.uniform(-10, 0) for _ in range(512 - 259)]
with open(sys.argv[1], "wb") as f:
    enc = [p.encode() for p in pieces]
    f.write(struct.pack("<i", max(len(e) for e in enc)))
    for s, e in zip(scores, enc): f.write(struct.pack("<fi", s, len(e)) + e)
# run.c's encode(bos=1, eos=0), written from its description
look = {}
for i, e in enumerate(pieces):
    look.setdefault(e.encode(), i)
def encode(text):
    b = text.encode()
    ids = [1]
    if b: ids.append(look[b" "])
    i = 0
    while i < len(b):
        j = i + 1
        while j < len(b) and j - i < 4 and (b[j] & 0xC0) == 0x80: j += 1
        cp = b[i:j]
        ids += [look[cp]] if cp in look else [c + 3 for c in cp]
        i = j
    while True:
        best, at = -1e10, -1
        for k in range(len(ids) - 1):
            m = pieces[ids[k]].encode() + pieces[ids[k + 1]].encode()
            if m in look and scores[look[m]] > best: best, at, bid = scores[look[m]], k, look[m]
        if at < 0: break
        ids[at:at + 2] = [bid]
    return ids
texts = ["Once upon a time there was a little girl named Lily", "once upon a time", "",
         "\u00e9t\u00e9 lily \U0001F600 girl!", "aaa  upon\ttime"]
with open(sys.argv[2], "w") as f:
    for t in texts: f.write(repr(t) + "\t" + ",".join(map(str, encode(t))) + "\n")
PY
    while IFS="$(printf '\t')" read -r text ids; do
        txt=$(python3 -c "import sys; print(eval(sys.argv[1]), end='')" "$text")
        "$ENG" --synthetic $SHAPE --tokenizer "$T/tok512.bin" --prompt "$txt" --max-tokens 3 \
            --json >"$T/pt.json" || return 1
        python3 - "$T/pt.json" "$ids" "$txt" <<'PY' || return 1
import json, sys
d = json.load(open(sys.argv[1]))
want = [int(x) for x in sys.argv[2].split(",")]
assert d["prompt"]["tokens"] == want, (sys.argv[3], d["prompt"]["tokens"], want)
assert d["prompt"]["text"] == sys.argv[3], (d["prompt"]["text"], sys.argv[3])
assert d["requests"][0]["prompt_len"] == len(want)
PY
    done <"$T/want.ids"
}
check prompt_text_encodes_as_run_c prompt_text
# a text byte the vocab cannot encode (tok.bin has no byte tokens)
check rejects_prompt_byte_without_token rejects_naming "byte 0x7A" --checkpoint "$T/m.bin" --tokenizer "$T/tok.bin" --prompt z
# a prompt with a checkpoint: the text is the generated pieces, after the prompt's last token
ckpt_prompt() {
    "$ENG" --checkpoint "$T/m.bin" --tokenizer "$T/tok.bin" --prompt-ids 1,10,20 --max-tokens 8 \
        --temperature 1 --sample-seed 3 --json >"$T/ckp.json" || return 1
    python3 - "$T/ckp.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["prompt"]["text"] == "A w20", d["prompt"]
q = d["requests"][0]
want = "".join("A" if t == 10 else " w%d" % t for t in q["tokens"])
assert q["text"] == want and len(q["tokens"]) <= 8, q
PY
}
check checkpoint_prompt_ids_and_text ckpt_prompt

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
