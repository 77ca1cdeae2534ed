# Sourced by every integration script. `check NAME CMD...` runs CMD and prints
# "ok NAME" or "not ok NAME"; the runner counts those lines. Each script makes
# its own scratch directory in $T and removes it on exit.
#
# What the scripts share, set here once (a script may still set its own):
#   ROOT       the source tree (scripts run from it)
#   B          $BUILD as an absolute path, usable after a cd
#   BIN PROGS  $BUILD/bin, $BUILD/tests/progs, as given
#   PS P DUMP  the poolscope CLI, the test programs, pstdump (absolute)
#   PRELOAD    the preload library (absolute)
#   key FILE NAME         the value of the first NAME=... line of FILE
#   same_keys WANT GOT    every line of WANT is a whole line of GOT (names the first missing)
#   wait_line FILE RE PID wait for a line matching RE in FILE (10 s, then kill PID)
set -u
BUILD=${BUILD:-build}
ROOT=$PWD
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
BIN=$BUILD/bin
PROGS=$BUILD/tests/progs
PS=$B/bin/poolscope P=$B/tests/progs DUMP=$B/tests/progs/pstdump
PRELOAD=$B/lib/libpoolscope-preload.so
T=$(mktemp -d "${TMPDIR:-/tmp}/poolscope-it.XXXXXX")
trap 'rm -rf "$T"' EXIT
status=0
check() {
    name=$1; shift
    if "$@"; then echo "ok $name"; else echo "not ok $name"; status=1; fi
}
# wait_line FILE REGEX PID: wait up to 10 s for a line of FILE matching
# REGEX (a background program's progress); on timeout kill PID and fail
wait_line() {
    i=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 200 ] && { kill "$3"; echo "  no line '$2' in $1" >&2; return 1; }
        sleep 0.05
    done
}
key() { sed -n "s/^$2=//p" "$1" | head -1; }
same_keys() {
    while IFS= read -r l; do
        grep -qxF "$l" "$2" || { echo "  want $l, got: $(grep "^${l%%=*}=" "$2")" >&2; return 1; }
    done <"$1"
}
