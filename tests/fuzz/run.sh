#!/bin/sh
# run.sh — build and run the libFuzzer harnesses (clang -fsanitize=fuzzer,
# address,undefined): the reader (tests/fuzz/fuzz_reader.c) and the
# analyzer's entry points: report, replay (one binary per policy; malloc
# replays in a helper process and is left out), sql and export.
#   FUZZ_SECONDS   run time of each harness (default 600)
#   FUZZ_TARGETS   which ones (default: all of them, in the order below)
#   FUZZ_JOBS      harnesses run at once (default 1)
#   BUILD          build root (default build); binaries, corpora, logs and
#                  crash artifacts in $BUILD/fuzz/<target>/
# Seeds: tests/golden/*.pstg, and a small refengine trace when $BUILD has
# refengine and the preload library (pool, tensor, KV and marker events).
# Prints "fuzz TARGET: executions N, crashes N" per harness; exits 1 if any
# crashed, 2 if one did not build.
set -u
BUILD=${BUILD:-build}
SECS=${FUZZ_SECONDS:-600}
JOBS=${FUZZ_JOBS:-1}
CC_FUZZ=${CC_FUZZ:-clang}
ALL="reader report replay-arena replay-pool replay-ideal replay-caching replay-kv-contiguous replay-kv-reserve replay-kv-step replay-kv-paged sql export"
TARGETS=${FUZZ_TARGETS:-$ALL}
out="$BUILD/fuzz"
mkdir -p "$out/seeds"

flags="-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -Iinclude -Icommon -Ipool -Ilibtrace -Imodel -Ianalyzer -Ireplay \
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
# the reader alone, as scripts/fuzz.sh builds it: reader.c and its parts
READER="libtrace/reader.c libtrace/rd_chunk.c libtrace/rd_decode.c libtrace/rd_merge.c libtrace/format.c common/*.c"
# the analyzer's harnesses: the libraries below the CLI (not the preload
# library, not the event API's global state)
LIBSRC="$(ls common/*.c pool/*.c model/*.c analyzer/*.c replay/*.c) $(ls libtrace/*.c | grep -v -e '/api.c$' -e '/launch.c$' -e '/pool_adapter.c$')"
LIBS="-lsqlite3 -ldw -lelf -lz -lstdc++ -lm -ldl -pthread"

cp tests/golden/*.pstg "$out/seeds/" 2>/dev/null || true
cp tests/fuzz/regress/* "$out/seeds/" 2>/dev/null || true   # inputs that once crashed a harness
if [ -x "$BUILD/bin/poolscope" ] && [ -x "$BUILD/bin/refengine" ] && [ ! -s "$out/seeds/refengine.pst" ]; then
    "$BUILD/bin/poolscope" record --stacks fp -o "$out/seeds/refengine.pst" -- "$BUILD/bin/refengine" \
        --synthetic dim=16,layers=1,heads=2,kv_heads=2,hidden=32,vocab=32,seq=32 --workload fixed:4,4 \
        --requests 2 --max-batch 2 --block-size 4 --quiet > /dev/null 2>&1 || rm -f "$out/seeds/refengine.pst"
fi
# format 1.4's mapping events: a reservation committed in part, named files
if [ -x "$BUILD/bin/poolscope" ] && [ -x "$BUILD/tests/progs/mmap_named" ] && [ ! -s "$out/seeds/mmap.pst" ]; then
    mkdir -p "$out/mmap"
    "$BUILD/bin/poolscope" record --stacks none -o "$out/seeds/mmap.pst" -- "$BUILD/tests/progs/mmap_named" \
        -d "$out/mmap" -f "$out/mmap/facts" > /dev/null 2>&1 || rm -f "$out/seeds/mmap.pst"
fi

build() {   # build TARGET -> $out/TARGET/fuzz
    t=$1; d="$out/$t"; mkdir -p "$d/corpus" "$d/crashes"
    case $t in
    reader) $CC_FUZZ $flags -o "$d/fuzz" tests/fuzz/fuzz_reader.c $READER ;;
    replay-*) $CC_FUZZ $flags -DFUZZ_POLICY="\"${t#replay-}\"" -o "$d/fuzz" tests/fuzz/fuzz_replay.c $LIBSRC $LIBS ;;
    *) $CC_FUZZ $flags -o "$d/fuzz" "tests/fuzz/fuzz_$t.c" $LIBSRC $LIBS ;;
    esac
}

run() {     # run TARGET: FUZZ_SECONDS, then its line
    t=$1; d="$out/$t"
    cp "$out"/seeds/* "$d/corpus/" 2>/dev/null
    "$d/fuzz" -max_total_time="$SECS" -artifact_prefix="$d/crashes/" -max_len=65536 -timeout=20 \
        -rss_limit_mb=2048 -print_final_stats=1 "$d/corpus" > "$d/fuzz.log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/fuzz.log" | tail -1)
    crashes=$(ls "$d/crashes" 2>/dev/null | grep -c '^\(crash\|leak\|timeout\|oom\)-')
    echo "fuzz $t: executions ${execs:-0}, crashes $crashes, exit $rc (log $d/fuzz.log)"
}

for t in $TARGETS; do
    if ! build "$t"; then echo "fuzz $t: build failed" >&2; exit 2; fi
done
i=0
for t in $TARGETS; do
    run "$t" &
    i=$((i + 1))
    [ $((i % JOBS)) -eq 0 ] && wait
done
wait
bad=0
for t in $TARGETS; do
    n=$(ls "$out/$t/crashes" 2>/dev/null | grep -c '^\(crash\|leak\|timeout\|oom\)-')
    [ "$n" -gt 0 ] && { bad=1; echo "fuzz $t: artifacts in $out/$t/crashes/"; }
done
exit $bad
