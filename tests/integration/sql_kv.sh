#!/bin/sh
# sql_kv.sh — `poolscope sql`: every `blocks` row of an allocation carries
# the tokens the pool put in that block (issue 12: allocation rows had
# n_used NULL). The pool fills a block at allocation and emits TOKENS only
# when a count changes, so an allocation row is where a block's first count
# lives. Checked against an independent count over the reader API
# (tests/progs/kv_count --blocks) on real refengine traces, several block
# sizes, a KV pool small enough that requests are preempted.
. tests/integration/lib.sh

MODEL=dim=64,layers=2,heads=4,kv_heads=4,hidden=128,vocab=512,seq=128
for bs in 4 16; do
    t=$T/kv$bs.pst
    "$PS" record -o "$t" -- "$B/bin/refengine" --synthetic $MODEL --workload sharegpt --requests 10 \
        --max-batch 4 --block-size $bs --kv-blocks $((192 / bs)) --quiet > "$T/eng$bs.out" 2>&1
    check "record_block_size_$bs" [ -s "$t" ]
    "$PS" sql "$t" -o "$T/kv$bs.db" --quiet 2> "$T/sql$bs.err"
    check "sql_loads_bs$bs" [ -s "$T/kv$bs.db" ]
    "$P/kv_count" --blocks "$t" > "$T/want$bs"
    sqlite3 -separator ' ' "$T/kv$bs.db" \
        "select pool_id, pool_seq, block_id, ifnull(n_used, 'NULL') from blocks where kind = 'alloc' order by event_id, rowid" \
        > "$T/got$bs"
    check "alloc_rows_exist_bs$bs" [ -s "$T/want$bs" ]
    check "alloc_rows_n_used_not_null_bs$bs" sh -c "! grep -q NULL '$T/got$bs'"
    check "alloc_rows_n_used_match_independent_count_bs$bs" sh -c \
        "cmp -s '$T/want$bs' '$T/got$bs' || { diff '$T/want$bs' '$T/got$bs' | head -5 >&2; exit 1; }"
    # some block is allocated partly filled (the last block of a prompt)
    check "some_alloc_row_partly_filled_bs$bs" sh -c \
        "[ \$(sqlite3 '$T/kv$bs.db' \"select count(*) from blocks where kind = 'alloc' and n_used < $bs\") -gt 0 ]"
done
exit $status
