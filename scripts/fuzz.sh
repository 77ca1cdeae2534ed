#!/bin/sh
# Build the reader's libFuzzer harness with clang and run it.
#   FUZZ_SECONDS  run time (default 600)
#   FUZZ_JOBS     parallel fuzzing processes (default 1)
#   BUILD         build root (default build); binary and corpus in $BUILD/fuzz/
# Seeds: tests/golden/*.pstg plus small writer-made traces. Prints the
# executions and crashes at the end; exits non-zero if a crash was found.
set -u
BUILD=${BUILD:-build}
SECS=${FUZZ_SECONDS:-600}
JOBS=${FUZZ_JOBS:-1}
CC_FUZZ=${CC_FUZZ:-clang}
out="$BUILD/fuzz"
mkdir -p "$out/corpus" "$out/crashes"

flags="-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -Iinclude -Icommon -Ilibtrace \
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
# The streaming reader is reader.c plus its parts rd_chunk.c, rd_decode.c and
# rd_merge.c (libtrace/rd_internal.h); named one by one so that other rd_
# files (rd_end.c, rd_recover.c) stay out of the harness.
if ! $CC_FUZZ $flags -o "$out/fuzz_reader" tests/fuzz/fuzz_reader.c \
        libtrace/reader.c libtrace/rd_chunk.c libtrace/rd_decode.c libtrace/rd_merge.c \
        libtrace/format.c common/*.c; then
    echo "fuzz: build failed" >&2
    exit 2
fi

cp tests/golden/*.pstg "$out/corpus/" 2>/dev/null || true

log="$out/fuzz.log"
echo "fuzz: running $out/fuzz_reader for ${SECS}s ($JOBS job(s)), log in $log"
if [ "$JOBS" -gt 1 ]; then
    "$out/fuzz_reader" -max_total_time="$SECS" -jobs="$JOBS" -workers="$JOBS" \
        -artifact_prefix="$out/crashes/" -max_len=65536 -print_final_stats=1 \
        "$out/corpus" >"$log" 2>&1
else
    "$out/fuzz_reader" -max_total_time="$SECS" -artifact_prefix="$out/crashes/" \
        -max_len=65536 -print_final_stats=1 "$out/corpus" >"$log" 2>&1
fi
rc=$?
execs=$(grep -h 'stat::number_of_executed_units' "$log" "$out"/fuzz-*.log 2>/dev/null |
        awk '{s += $2} END {print s + 0}')
crashes=$(ls "$out/crashes" 2>/dev/null | grep -c '^\(crash\|leak\|timeout\|oom\)-' || true)
echo "fuzz: executions $execs, crashes $crashes (artifacts in $out/crashes/), exit $rc"
if [ "$crashes" -gt 0 ] || [ "$rc" -ne 0 ]; then
    tail -40 "$log"
    exit 1
fi
exit 0
