# Sourced by every integration script. `check NAME CMD...` runs CMD and prints
# "ok NAME" or "not ok NAME"; the runner counts those lines. Each script makes
# its own scratch directory in $T and removes it on exit.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/bin
PRELOAD=$PWD/$BUILD/lib/libpoolscope-preload.so
PROGS=$BUILD/tests/progs
T=$(mktemp -d "${TMPDIR:-/tmp}/poolscope-it.XXXXXX")
trap 'rm -rf "$T"' EXIT
status=0
check() {
    name=$1; shift
    if "$@"; then echo "ok $name"; else echo "not ok $name"; status=1; fi
}
