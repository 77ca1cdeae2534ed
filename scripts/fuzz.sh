#!/bin/sh
# Build the reader's libFuzzer harness and run it: tests/fuzz/run.sh with
# FUZZ_TARGETS=reader, so the reader is built as every other harness is
# (the Makefile's libraries, instrumented; a harness naming the reader's
# files one by one once missed rd_inflate.c and columns.c and did not
# link). Any other FUZZ_TARGETS given is kept.
#   FUZZ_SECONDS  run time (default 600)
#   FUZZ_JOBS     harnesses at once (default 1)
#   BUILD         build root (default build); binary, corpus and crashes in
#                 $BUILD/fuzz/reader/
# Exits 1 if a crash was found, 2 if the harness did not build.
set -u
FUZZ_TARGETS=${FUZZ_TARGETS:-reader}
export FUZZ_TARGETS
exec sh "$(dirname "$0")/../tests/fuzz/run.sh"
