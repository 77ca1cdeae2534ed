#!/bin/sh
# Runs the cmocka suites (build/tests/test_*) and the shell integration tests
# (tests/integration/*.sh), then prints one closing line "N passed, N failed".
# Usage: run-tests.sh all|unit|integration
# Under a sanitizer build only the unit suites run (the interposer is tested
# plainly and under valgrind, never under ASan/TSan).
# DEBUG_BUILD=dir (make test sets it): the unit suites also run once from
# that debug build (make debug: internal checks compiled in), each named
# debug/test_x in the closing lines.
set -u
BUILD=${BUILD:-build}
what=${1:-all}
passed=0; failed=0; failed_names=""
log=$(mktemp); trap 'rm -f "$log"' EXIT

count() { # $1 = number passed, $2 = number failed, $3 = name
    passed=$((passed + $1)); failed=$((failed + $2))
    [ "$2" -gt 0 ] && failed_names="$failed_names $3"
    return 0
}

units() { # $1 = build folder, $2 = prefix of the suites' names
    for t in "$1"/tests/test_*; do
        [ -x "$t" ] || continue
        name=$2$(basename "$t")
        [ -n "$2" ] && echo "== unit: $name"
        "$t" >"$log" 2>&1; rc=$?
        cat "$log"
        p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\./\1/p' "$log" | tail -1)
        f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s), listed below:/\1/p' "$log" | tail -1)
        p=${p:-0}; f=${f:-0}
        # A suite that crashed or printed no summary counts as one failure.
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
        count "$p" "$f" "$name"
    done
}

if [ "$what" != integration ]; then
    units "$BUILD" ""
    if [ -n "${DEBUG_BUILD:-}" ]; then
        # A debug build that was not built (or lost its suites) must not pass.
        ls "$DEBUG_BUILD"/tests/test_* >/dev/null 2>&1 || count 0 1 "debug/(no suites in $DEBUG_BUILD)"
        units "$DEBUG_BUILD" "debug/"
    fi
fi

if [ "$what" != unit ]; then
    for s in tests/integration/*.sh; do
        [ -f "$s" ] || continue
        name=$(basename "$s" .sh)
        [ "$name" = lib ] && continue   # sourced by the others, not a test
        echo "== integration: $name"
        BUILD="$BUILD" sh "$s" >"$log" 2>&1; rc=$?
        cat "$log"
        p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log")
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
        if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # a script that checked nothing fails
        count "$p" "$f" "$name"
    done
fi

[ -n "$failed_names" ] && echo "failing:$failed_names"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
