# pytest_plugin.sh — the pytest plugin of the Python package
# (python/poolscope/pytest.py; issue 26 item 5) on tests/python/pytest_limits.py:
# a test over its limit_memory, one under it, one leaking over its
# limit_leaks and one without markers.
#
#   - run untraced, the plugin runs pytest again under `poolscope record`;
#     exactly the two tests over a limit fail, each message naming the
#     figure, the limit and the allocating line (file.py:LINE, the line
#     numbers found here by grep of the fixture's "# poolscope: NAME"
#     comments);
#   - the figures against tracemalloc (the independent count: the same test
#     function run under tracemalloc), within 10%;
#   - every test is a phase of the trace: `poolscope report --phase NAME`;
#   - already under `poolscope record` it runs in place (no second run);
#     without --poolscope the markers do nothing; without a poolscope
#     program it prints the one command to run and exits with an error;
#   - pip-installed, `pytest --poolscope` loads it through its entry point.
#
# Python is Debian's /usr/bin/python3 with python3-pytest (scripts/deps.sh);
# PYTHON= overrides. pytest missing is a failure, not a skip.
. tests/integration/lib.sh

PY=${PYTHON:-/usr/bin/python3}
FX=$ROOT/tests/python/pytest_limits.py
PYTHONPATH=$ROOT/python
export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INDEX=1 PIP_ROOT_USER_ACTION=ignore
unset POOLSCOPE_BIN

# line NAME: the fixture's line number marked "# poolscope: NAME"
line() { grep -n "# poolscope: $1\$" "$FX" | cut -d: -f1; }

# failure TEST FILE: the failure section of TEST in pytest's output FILE
failure() { sed -n "/^_* $1 _*\$/,/^\(_\{3,\}\|=\{3,\}\)/p" "$2"; }

# failed FILE: the tests pytest says failed, one per line, sorted
failed() { sed -n 's/^FAILED [^ ]*::\([A-Za-z0-9_]*\).*/\1/p' "$1" | sort; }

has_pytest() {
    "$PY" -c 'import pytest' 2>"$T/imp.err" ||
        { echo "  $PY cannot import pytest (sh scripts/deps.sh installs python3-pytest): $(tail -1 "$T/imp.err")" >&2; return 1; }
}
check pytest_importable has_pytest

# pytest with the plugin, from $T (nothing written into the tree): OUT ERR ARGS...
run_pytest() {
    o=$1 e=$2; shift 2
    (cd "$T" && "$PY" -m pytest -p no:cacheprovider -rf --rootdir "$T" "$@" "$FX") >"$o" 2>"$e"
}

# (1) untraced: the plugin runs itself under record; the right two fail
reexec() {
    run_pytest "$T/run.out" "$T/run.err" -p poolscope.pytest --poolscope --poolscope-bin "$PS" \
        --poolscope-out "$T/run.pst"
    rc=$?
    [ $rc = 1 ] || { echo "  pytest exit $rc: $(tail -3 "$T/run.out" "$T/run.err")" >&2; return 1; }
    grep -q '^poolscope: not traced; running under the tracer: .* record --paused -o '"$T/run.pst"' -- ' "$T/run.err" &&
        [ -s "$T/run.pst" ] || { echo "  no re-run under record: $(head -3 "$T/run.err")" >&2; return 1; }
    printf 'test_leaks\ntest_over_memory\n' >"$T/want.failed"
    failed "$T/run.out" >"$T/got.failed"
    diff "$T/want.failed" "$T/got.failed" >&2 && grep -q '2 failed, 2 passed' "$T/run.out" ||
        { echo "  failed: $(tr '\n' ' ' <"$T/got.failed"); $(tail -1 "$T/run.out")" >&2; return 1; }
}
check pytest_plugin_reexec_fails_exactly_over_memory_and_leaks reexec

# (2) each message: the figure, the limit, the line that allocated
messages() {
    failure test_over_memory "$T/run.out" >"$T/over.msg"
    failure test_leaks "$T/run.out" >"$T/leak.msg"
    big=$(line over_big) small=$(line over_small) leak=$(line leak)
    [ -n "$big" ] && [ -n "$small" ] && [ -n "$leak" ] || { echo "  fixture lines not found" >&2; return 1; }
    grep -Eq "^poolscope: test_over_memory allocated [0-9]+ B \([0-9.]+ MiB\) held at once \(its peak\), over its limit_memory\('5 MB'\) of 5242880 B" "$T/over.msg" &&
        grep -Eq "^ +6\.[0-9]+ MiB  .*pytest_limits\.py:$big \(test_over_memory\)\$" "$T/over.msg" &&
        grep -Eq "^ +4\.[0-9]+ MiB  .*pytest_limits\.py:$small " "$T/over.msg" ||
        { echo "  over_memory message (want lines $big, $small):" >&2; cat "$T/over.msg" >&2; return 1; }
    grep -Eq "^poolscope: test_leaks leaked [0-9]+ B \([0-9.]+ MiB\) \(allocated during the test, still live at its end\), over its limit_leaks\('1 MB'\) of 1048576 B" "$T/leak.msg" &&
        grep -Eq "^ +3\.[0-9]+ MiB  .*pytest_limits\.py:$leak \(test_leaks\)\$" "$T/leak.msg" &&
        ! grep -q "pytest_limits\.py:$((leak + 1)) " "$T/leak.msg" ||
        { echo "  leaks message (want line $leak, not $((leak + 1))):" >&2; cat "$T/leak.msg" >&2; return 1; }
    grep -q "poolscope report $T/run.pst --phase test_over_memory" "$T/over.msg"
}
check pytest_plugin_messages_name_figure_limit_and_line messages

# (3) the figures against tracemalloc, within 10%
near() { # NAME GOT WANT
    [ -n "$2" ] && [ -n "$3" ] && [ "$3" -gt 0 ] &&
        awk -v g="$2" -v w="$3" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(d <= w / 10) }' ||
        { echo "  $1: plugin $2 B, tracemalloc $3 B" >&2; return 1; }
}
oracle() {
    "$PY" "$FX" test_over_memory >"$T/tm_over.out" && "$PY" "$FX" test_leaks >"$T/tm_leak.out" || return 1
    got_peak=$(sed -n 's/^poolscope: test_over_memory allocated \([0-9]*\) B.*/\1/p' "$T/over.msg")
    got_leak=$(sed -n 's/^poolscope: test_leaks leaked \([0-9]*\) B.*/\1/p' "$T/leak.msg")
    echo "  peak: plugin $got_peak B, tracemalloc $(key "$T/tm_over.out" peak) B;" \
        "leak: plugin $got_leak B, tracemalloc $(key "$T/tm_leak.out" leaked) B" >&2
    near peak "$got_peak" "$(key "$T/tm_over.out" peak)" && near leak "$got_leak" "$(key "$T/tm_leak.out" leaked)"
}
check pytest_plugin_figures_within_10pct_of_tracemalloc oracle

# (4) every test is a phase: report --phase NAME reads it afterwards
phases() {
    "$PS" report "$T/run.pst" --json >"$T/run.json" 2>"$T/rep.err" || { cat "$T/rep.err" >&2; return 1; }
    "$PY" - "$T/run.json" <<'EOF' || return 1
import json, sys
d = json.load(open(sys.argv[1]))
got = {k: v["count"] for k, v in d["phases"].items()}
want = {"test_over_memory": 1, "test_under_memory": 1, "test_leaks": 1, "test_plain": 1}
if got != want or not d["complete"]:
    sys.exit("  phases %s, complete %s" % (got, d["complete"]))
EOF
    for t in test_over_memory test_under_memory test_leaks test_plain; do
        "$PS" report "$T/run.pst" --phase $t >"$T/$t.rep" 2>&1 && grep -q "selected    phase '$t'" "$T/$t.rep" ||
            { echo "  report --phase $t: $(head -3 "$T/$t.rep")" >&2; return 1; }
    done
    # the phase holds the test's own allocations: 3 + 4 MiB (its leak is
    # freed at the interpreter's exit, so the finished trace has no leak)
    "$PS" report "$T/run.pst" --phase test_leaks --json >"$T/leaks.json" 2>/dev/null &&
        "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not 7 * 2**20 <= d["total_allocated_bytes"] < 7.7 * 2**20)' "$T/leaks.json" ||
        { echo "  report --phase test_leaks: total_allocated_bytes not 7 MiB" >&2; return 1; }
}
check pytest_plugin_each_test_is_a_report_phase phases

# (5) already under record (recording the whole session): runs in place
in_place() {
    (cd "$T" && "$PS" record -o "$T/own.pst" -- "$PY" -m pytest -p no:cacheprovider -rf --rootdir "$T" \
        -p poolscope.pytest --poolscope --poolscope-bin "$PS" "$FX") >"$T/own.out" 2>"$T/own.err"
    rc=$?
    [ $rc = 1 ] && ! grep -q 'not traced' "$T/own.err" && grep -q "^poolscope: tracing the whole session into $T/own.pst" "$T/own.out" ||
        { echo "  exit $rc: $(tail -3 "$T/own.out" "$T/own.err")" >&2; return 1; }
    failed "$T/own.out" >"$T/own.failed"
    diff "$T/want.failed" "$T/own.failed" >&2 &&
        failure test_over_memory "$T/own.out" | grep -q "pytest_limits\.py:$(line over_big) "
}
check pytest_plugin_under_record_runs_in_place in_place

# (6) without --poolscope the markers do nothing
no_option() {
    n=$(ls "$T" | grep -c '\.pst$')
    run_pytest "$T/off.out" "$T/off.err" -p poolscope.pytest && grep -q '4 passed' "$T/off.out" &&
        [ "$(ls "$T" | grep -c '\.pst$')" = "$n" ] || { echo "  $(tail -2 "$T/off.out")" >&2; return 1; }
}
check pytest_plugin_without_option_does_nothing no_option

# (7) no poolscope program: the one command to run, and an error
no_binary() {
    (PATH=/usr/bin:/bin; export PATH; command -v poolscope >/dev/null) && { echo "  a poolscope on /usr/bin" >&2; return 1; }
    PATH=/usr/bin:/bin run_pytest "$T/nb.out" "$T/nb.err" -p poolscope.pytest --poolscope --poolscope-out "$T/nb.pst"
    rc=$?
    [ $rc = 4 ] && grep -q 'no poolscope program was found' "$T/nb.err" &&
        grep -Eq '^  poolscope record --paused -o [^ ]*nb\.pst -- [^ ]*python[0-9.]* -m pytest .*--poolscope' "$T/nb.err" &&
        [ ! -e "$T/nb.pst" ] || { echo "  exit $rc: $(cat "$T/nb.err")" >&2; return 1; }
}
check pytest_plugin_without_binary_prints_the_command no_binary

# (8) pip-installed: `pytest --poolscope` through the pytest11 entry point
# (and -p poolscope.pytest as well loads it once)
entry_point() (
    cp -r "$ROOT/python" "$T/src" && rm -rf "$T/src/build" "$T/src"/*.egg-info
    unset PYTHONPATH
    "$PY" -m pip install --no-deps --no-build-isolation --target "$T/site" "$T/src" >"$T/pip.log" 2>&1 ||
        { echo "  pip --target: $(tail -3 "$T/pip.log")" >&2; return 1; }
    PYTHONPATH=$T/site run_pytest "$T/ep.out" "$T/ep.err" --poolscope --poolscope-bin "$PS" --poolscope-out "$T/ep.pst"
    rc=$?
    failed "$T/ep.out" >"$T/ep.failed"
    [ $rc = 1 ] && diff "$T/want.failed" "$T/ep.failed" >&2 ||
        { echo "  entry point: exit $rc: $(tail -3 "$T/ep.out" "$T/ep.err")" >&2; return 1; }
    PYTHONPATH=$T/site run_pytest "$T/ep2.out" "$T/ep2.err" -p poolscope.pytest --poolscope --poolscope-bin "$PS" \
        --poolscope-out "$T/ep2.pst"
    rc=$?
    failed "$T/ep2.out" >"$T/ep2.failed"
    [ $rc = 1 ] && diff "$T/want.failed" "$T/ep2.failed" >&2 ||
        { echo "  entry point and -p: exit $rc: $(tail -3 "$T/ep2.out" "$T/ep2.err")" >&2; return 1; }
)
check pytest_plugin_entry_point_when_installed entry_point

grep '^poolscope: trace ' "$T/run.out" | sed 's/^/  /' >&2
exit $status
