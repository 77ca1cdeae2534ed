#!/bin/sh
# run.sh — build and run the libFuzzer harnesses (clang -fsanitize=fuzzer,
# address,undefined): the reader (fuzz_reader.c) and every reading command
# of the CLI through its library entry point: report, replay (one binary per
# policy; malloc replays in a helper process and is left out), sql, export
# (one binary per format), html, plot (scripts and data files; gnuplot is
# never run), diff and gate.
#   FUZZ_SECONDS   run time of each harness (default 600)
#   FUZZ_TARGETS   which ones (default: all of them, in the order below)
#   FUZZ_JOBS      harnesses run at once (default 1)
#   FUZZ_BUILD_ONLY=1  build the harnesses, run nothing
#   BUILD          build root (default build); binaries, corpora, logs and
#                  crash artifacts in $BUILD/fuzz/<target>/
#
# The harnesses link the same archives as the CLI (libreplay.a ...
# libpscommon.a), built by the Makefile itself with clang and the fuzzer's
# coverage instrumentation into $BUILD/fuzz/lib. Naming source files here
# is what once left rd_inflate.c and columns.c out of the reader's harness
# (issue 25, item 9): with the archives a new file is in the harness as soon
# as it is in the library, and the link line is the Makefile's.
#
# Seeds: tests/golden/*.pstg, tests/fuzz/regress/* and small traces recorded
# with $BUILD's poolscope when it has been built (pool, tensor, KV, marker
# and mapping events), plus report/replay JSON made from them for the
# harnesses that read JSON.
# Prints "fuzz TARGET: executions N, crashes N" per harness; exits 1 if any
# crashed, 2 if one did not build.
set -u
BUILD=${BUILD:-build}
SECS=${FUZZ_SECONDS:-600}
JOBS=${FUZZ_JOBS:-1}
CC_FUZZ=${CC_FUZZ:-clang}
POLICIES="arena pool ideal caching kv-contiguous kv-reserve kv-step kv-paged"
ALL="reader report $(for p in $POLICIES; do printf 'replay-%s ' "$p"; done)sql export-chrome export-folded export-pprof html plot diff gate"
TARGETS=${FUZZ_TARGETS:-$ALL}
out="$BUILD/fuzz"
lib="$out/lib"
mkdir -p "$out/seeds"

# The libraries, instrumented: the Makefile's own rules and file lists
# (sources by wildcard), another compiler and flags. -Werror off: clang
# warns about things gcc does not, and this build checks memory, not style.
SAN_FLAGS="-fsanitize=fuzzer-no-link"
if ! make --no-print-directory -s BUILD="$lib" CC="$CC_FUZZ" SAN=address,undefined OPT=-O1 WERROR= \
        CFLAGS="$SAN_FLAGS" libs >&2; then
    echo "fuzz: the instrumented libraries did not build" >&2
    exit 2
fi
# Link order as the Makefile's LIBS: users before what they use.
ARCHIVES="$lib/lib/libreplay.a $lib/lib/libanalyzer.a $lib/lib/libpsmodel.a $lib/lib/libpstrace.a \
          $lib/lib/libpool.a $lib/lib/libpscommon.a"
LDLIBS="-lsqlite3 -ldw -lelf -lz -lzstd -lstdc++ -lm -ldl -pthread"
flags="-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -Iinclude -Icommon -Ipool -Ilibtrace -Imodel -Ianalyzer \
       -Ireplay -Itests/fuzz -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"

cp tests/golden/*.pstg "$out/seeds/" 2>/dev/null || true
cp tests/fuzz/regress/* "$out/seeds/" 2>/dev/null || true   # inputs that once crashed a harness
PS="$BUILD/bin/poolscope"
if [ -x "$PS" ] && [ -x "$BUILD/bin/refengine" ] && [ ! -s "$out/seeds/refengine.pst" ]; then
    "$PS" record --stacks fp -o "$out/seeds/refengine.pst" -- "$BUILD/bin/refengine" \
        --synthetic dim=16,layers=1,heads=2,kv_heads=2,hidden=32,vocab=32,seq=32 --workload fixed:4,4 \
        --requests 2 --max-batch 2 --block-size 4 --quiet > /dev/null 2>&1 || rm -f "$out/seeds/refengine.pst"
fi
# format 1.4's mapping events: a reservation committed in part, named files
if [ -x "$PS" ] && [ -x "$BUILD/tests/progs/mmap_named" ] && [ ! -s "$out/seeds/mmap.pst" ]; then
    mkdir -p "$out/mmap"
    "$PS" record --stacks none -o "$out/seeds/mmap.pst" -- "$BUILD/tests/progs/mmap_named" \
        -d "$out/mmap" -f "$out/mmap/facts" > /dev/null 2>&1 || rm -f "$out/seeds/mmap.pst"
fi
# JSON seeds for diff, gate (report --json) and plot (replay --json)
mkdir -p "$out/seeds-json"
if [ -x "$PS" ] && [ -s "$out/seeds/refengine.pst" ] && [ ! -s "$out/seeds-json/report.json" ]; then
    "$PS" report --json "$out/seeds/refengine.pst" > "$out/seeds-json/report.json" 2>/dev/null || true
    "$PS" replay --json "$out/seeds/refengine.pst" > "$out/seeds-json/replay.json" 2>/dev/null || true
fi

build() {   # build TARGET -> $out/TARGET/fuzz
    t=$1; d="$out/$t"; mkdir -p "$d/corpus" "$d/crashes"
    case $t in
    replay-*) src=tests/fuzz/fuzz_replay.c; def="-DFUZZ_POLICY=\"${t#replay-}\"" ;;
    export-*) src=tests/fuzz/fuzz_export.c; def="-DFUZZ_FORMAT=\"${t#export-}\"" ;;
    *) src="tests/fuzz/fuzz_$t.c"; def= ;;
    esac
    $CC_FUZZ $flags $def -o "$d/fuzz" "$src" $ARCHIVES $LDLIBS
}

run() {     # run TARGET: FUZZ_SECONDS, then its line
    t=$1; d="$out/$t"
    cp "$out"/seeds/* "$d/corpus/" 2>/dev/null
    case $t in diff|gate|plot) cp "$out"/seeds-json/* "$d/corpus/" 2>/dev/null ;; esac
    "$d/fuzz" -max_total_time="$SECS" -artifact_prefix="$d/crashes/" -max_len=65536 -timeout=20 \
        -rss_limit_mb=2048 -print_final_stats=1 "$d/corpus" > "$d/fuzz.log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/fuzz.log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$d/fuzz.log" | tail -1)
    crashes=$(ls "$d/crashes" 2>/dev/null | grep -c '^\(crash\|leak\|timeout\|oom\)-')
    echo "fuzz $t: executions ${execs:-0}, ${cov:-cov: ?}, crashes $crashes, exit $rc (log $d/fuzz.log)"
}

for t in $TARGETS; do
    if ! build "$t"; then echo "fuzz $t: build failed" >&2; exit 2; fi
done
[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && { echo "fuzz: built $TARGETS"; exit 0; }
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
