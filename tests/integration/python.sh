# python.sh — the Python package (python/poolscope, ctypes): its markers and
# scopes reach the trace as the script counted them (pstdump and the sql
# markers table); its ctypes mirror of ps_api_t/ps_event_t is the C header's
# (a stand-in tracer built from poolscope.h logs what it receives); a table
# of another version or size disables it; poolscope.torch.instrument() on
# small torch models gives one "forward" scope per call and one per layer,
# and `report --phase forward` / `replay` read the trace; without the tracer
# everything is a no-op; `pip install` works offline (--target and a venv).
#
# Python is Debian's /usr/bin/python3 (it has python3-torch from
# scripts/deps.sh; the python3 on PATH may be another one): PYTHON= overrides.
# Torch missing is a failure, not a skip.
. tests/integration/lib.sh

PY=${PYTHON:-/usr/bin/python3}
SRC=$ROOT/python
TP=$ROOT/tests/python
# the package from the tree, except where a test unsets it (the pip ones)
PYTHONPATH=$SRC
export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INDEX=1 PIP_ROOT_USER_ACTION=ignore

# sqlcount DB WHERE: markers rows matching WHERE
sqlcount() { sqlite3 "$1" "SELECT count(*) FROM markers WHERE $2"; }

# rec NAME PYTHON SCRIPT [ARGS]: record SCRIPT into $T/NAME.pst (stdout
# $T/NAME.out), dump it ($T/NAME.dump) and load it into $T/NAME.db
rec() {
    n=$1 py=$2; shift 2
    "$PS" record --stacks none -o "$T/$n.pst" -- "$py" "$@" >"$T/$n.out" 2>"$T/$n.err" ||
        { echo "  $n: record failed: $(tail -3 "$T/$n.err")" >&2; return 1; }
    "$DUMP" "$T/$n.pst" >"$T/$n.dump" &&
        "$PS" sql "$T/$n.pst" -o "$T/$n.db" >/dev/null 2>"$T/$n.sqlerr" || return 1
}

# the counts of markers.py ($T/NAME.out) found in the trace, by pstdump and by sql
markers_match() {
    n=$1
    grep -qx 'active=1' "$T/$n.out" || { echo "  $n: no tracer table found" >&2; return 1; }
    grep -v '^active=' "$T/$n.out" >"$T/$n.want"
    [ "$(grep -c . "$T/$n.want")" -ge 12 ] || return 1
    same_keys "$T/$n.want" "$T/$n.dump" || return 1
    db=$T/$n.db
    for kind in point begin end; do
        want=$(key "$T/$n.want" "mark_$kind") got=$(sqlcount "$db" "kind = '$kind'")
        [ "$want" = "$got" ] || { echo "  $n: $kind: script $want, sql $got" >&2; return 1; }
    done
    [ "$(key "$T/$n.dump" thread_name.py-main)" = 1 ] &&
        [ "$(key "$T/$n.dump" thread_name.py-worker-2)" = 1 ] &&
        [ "$(key "$T/$n.dump" trace_off)" = 1 ] && [ "$(key "$T/$n.dump" trace_on)" = 1 ] || return 1
    # payloads and instances as given; nothing from the paused stretch
    [ "$(sqlcount "$db" "name = 'hidden'")" = 0 ] &&
        [ "$(sqlcount "$db" "name = 'step' AND payload = '[2,-2,1099511627776]'")" = 1 ] &&
        [ "$(sqlcount "$db" "name = 'big' AND payload = '[1,2,3,4,5,6,7,8]'")" = 1 ] &&
        [ "$(sqlcount "$db" "name = 'request' AND kind = 'begin' AND instance = 103 AND payload = '[13,32]'")" = 1 ] &&
        [ "$(sqlcount "$db" "name = 'request' AND kind = 'end' AND instance BETWEEN 100 AND 104")" = 5 ] &&
        [ "$(sqlcount "$db" "name = 'after' AND payload = '[0]'")" = 1 ] || {
        echo "  $n: payloads or instances differ: $(sqlite3 "$db" "SELECT name, kind, instance, payload FROM markers WHERE name IN ('step','big','request','after','hidden') LIMIT 8" | tr '\n' ' ')" >&2
        return 1
    }
    # a marker from a signal handler did not overwrite the one it interrupted
    [ "$(sqlcount "$db" "name = 'tick'")" -ge 40 ] &&
        [ "$(sqlcount "$db" "name = 'spin' AND NOT (json_array_length(payload) = 2 AND json_extract(payload, '\$[1]') = 2 * json_extract(payload, '\$[0]'))")" = 0 ] &&
        [ "$(sqlcount "$db" "name = 'tick' AND json_array_length(payload) != 1")" = 0 ] &&
        [ "$(sqlite3 "$db" "SELECT count(DISTINCT payload) FROM markers WHERE name = 'tick'")" = "$(sqlcount "$db" "name = 'tick'")" ] || {
        echo "  $n: spin/tick payloads mixed" >&2
        return 1
    }
    # every scope's begin has its end, paired by (name, instance)
    [ "$(sqlite3 "$db" "SELECT count(*) FROM markers b WHERE b.kind = 'begin' AND (SELECT count(*) FROM markers e WHERE e.kind = 'end' AND e.name = b.name AND e.instance = b.instance) != (SELECT count(*) FROM markers c WHERE c.kind = 'begin' AND c.name = b.name AND c.instance = b.instance)")" = 0 ]
}

# (1) markers and scopes round-trip into the trace
round_trip() {
    rec py "$PY" "$TP/markers.py" 5 && markers_match py
}
check python_markers_round_trip round_trip

# the package's ctypes layout against the C header, through a stand-in tracer
fake() { # NAME CFLAGS...
    n=$1; shift
    cc -std=c11 -shared -fPIC -Wall -Wextra -Werror -I"$ROOT/include" "$@" -o "$T/$n.so" "$TP/fake_api.c"
}
layout() {
    fake fake_good || return 1
    FAKE_PS_LOG=$T/fake.log LD_PRELOAD=$T/fake_good.so "$PY" "$TP/layout.py" >"$T/layout.out" || return 1
    grep -qx 'active=1' "$T/layout.out" && grep -qx 'recording=1' "$T/layout.out" &&
        grep -qx 'stopped_recording=0' "$T/layout.out" || { echo "  layout: $(cat "$T/layout.out")" >&2; return 1; }
    diff "$TP/layout.expected" "$T/fake.log" >&2
}
check python_ctypes_layout_is_poolscope_h layout

# a table of another version, a smaller one, one with a NULL entry point, or
# POOLSCOPE_PYTHON=0: the package stays off and never calls the table
mismatch() {
    fake fake_v2 -DFAKE_VERSION=2 && fake fake_small -DFAKE_SIZE=8 && fake fake_null -DFAKE_NULL_EMIT &&
        fake fake_good || return 1
    for v in v2 small null good; do
        off=; [ $v = good ] && off="POOLSCOPE_PYTHON=0"
        rm -f "$T/mm.log"
        env $off FAKE_PS_LOG=$T/mm.log LD_PRELOAD=$T/fake_$v.so "$PY" "$TP/layout.py" >"$T/mm.out" || return 1
        grep -qx 'active=0' "$T/mm.out" && [ ! -e "$T/mm.log" ] ||
            { echo "  fake_$v $off: the package used the table" >&2; return 1; }
    done
}
check python_mismatched_table_disables_package mismatch

# record --paused, resumed by poolscope.start() from the script
paused() {
    "$PS" record --paused --stacks none -o "$T/paused.pst" -- "$PY" -c \
        'import poolscope; poolscope.mark("before"); poolscope.start(); poolscope.mark("after"); print(int(poolscope.recording()))' \
        >"$T/paused.out" 2>"$T/paused.err" || return 1
    "$DUMP" "$T/paused.pst" >"$T/paused.dump" || return 1
    grep -qx 1 "$T/paused.out" && [ "$(key "$T/paused.dump" mark.after)" = 1 ] &&
        [ -z "$(key "$T/paused.dump" mark.before)" ]
}
check python_start_resumes_paused_record paused

# (2) torch: instrument(), remove(), a ModuleList model, steps()
torch_import() {
    "$PY" -c 'import torch' 2>"$T/torch.err" ||
        { echo "  $PY cannot import torch (sh scripts/deps.sh installs python3-torch): $(tail -1 "$T/torch.err")" >&2; return 1; }
}
check python_torch_importable torch_import

torch_instrument() {
    rec tm "$PY" "$TP/torch_model.py" || return 1
    grep -qx 'active=1' "$T/tm.out" && grep -qx 'hooks=8' "$T/tm.out" &&
        grep -qx 'chosen=layers.0,layers.1,layers.2,head' "$T/tm.out" || { echo "  torch: $(head -3 "$T/tm.out" | tr '\n' ' ')" >&2; return 1; }
    grep '^mark' "$T/tm.out" >"$T/tm.want"
    same_keys "$T/tm.want" "$T/tm.dump" || return 1
    db=$T/tm.db
    [ "$(sqlcount "$db" "name = 'forward' AND kind = 'begin'")" = 5 ] &&
        [ "$(sqlcount "$db" "name = 'forward' AND kind = 'end'")" = 5 ] &&
        [ "$(sqlcount "$db" "name = 'Linear' AND kind = 'begin'")" = 15 ] &&
        [ "$(sqlcount "$db" "name = 'Linear' AND kind = 'end'")" = 15 ] &&
        [ "$(sqlcount "$db" "name = 'Linear' AND kind = 'begin' AND instance = 2")" = 5 ] &&
        [ "$(sqlcount "$db" "name = 'forward' AND kind = 'begin' AND payload = '[4,16]'")" = 5 ] &&
        [ "$(sqlcount "$db" "name = 'block' AND kind = 'begin'")" = 8 ] &&
        [ "$(sqlcount "$db" "name = 'net' AND kind = 'begin'")" = 2 ] &&
        [ "$(sqlcount "$db" "name = 'decode' AND kind = 'begin'")" = 3 ] &&
        [ "$(sqlcount "$db" "name = 'prefill' AND kind = 'begin' AND payload = '[0]'")" = 1 ] || {
        echo "  torch markers: $(sqlite3 "$db" "SELECT name || ':' || kind || '=' || count(*) FROM markers GROUP BY name, kind" | tr '\n' ' ')" >&2
        return 1
    }
}
check python_torch_instrument_5_forward_15_layers torch_instrument

# the analyzers read those scopes: phases, decode steps, replay
torch_analyzers() {
    [ -f "$T/tm.pst" ] || return 1
    "$PS" report "$T/tm.pst" --phase forward >"$T/tm.report" 2>&1 &&
        grep -q "selected    phase 'forward'" "$T/tm.report" || { echo "  report --phase forward failed" >&2; return 1; }
    "$PS" report "$T/tm.pst" --json >"$T/tm.json" || return 1
    "$PY" - "$T/tm.json" <<'EOF' || return 1
import json, sys
d = json.load(open(sys.argv[1]))
ph = d["phases"]
got = (ph["forward"]["count"], ph["Linear"]["count"], ph["block"]["count"], ph["prefill"]["count"],
       ph["decode"]["count"], d["decode_steps"])
if got != (5, 15, 8, 1, 3, 3):
    sys.exit("  report --json: forward, Linear, block, prefill, decode, decode_steps = %s" % (got,))
EOF
    "$PS" replay "$T/tm.pst" --policy ideal,arena --arena-reset forward >"$T/tm.replay" 2>&1 &&
        grep -q '^arena: 5 resets' "$T/tm.replay" || { echo "  replay: $(head -3 "$T/tm.replay")" >&2; return 1; }
}
check python_torch_trace_read_by_report_and_replay torch_analyzers

# (3) without the tracer: imports, does nothing, sets nothing up
untraced() {
    "$PY" "$TP/untraced.py" >"$T/un.out" 2>&1 && grep -qx 'untraced ok' "$T/un.out" ||
        { echo "  $(cat "$T/un.out")" >&2; return 1; }
    "$PY" "$TP/markers.py" 2 >"$T/un2.out" && grep -qx 'active=0' "$T/un2.out"
}
check python_untraced_is_noop untraced

# the preload library loaded but not recording (no POOLSCOPE_OUT): the table
# is there, calls pass through without error
passthrough() {
    LD_PRELOAD=$PRELOAD "$PY" "$TP/markers.py" 2 >"$T/pt.out" 2>"$T/pt.err" &&
        grep -qx 'active=1' "$T/pt.out"
}
check python_preload_without_output_passes_through passthrough

# (4) pip install, offline: --target, and a venv that then records markers.py
# (a subshell each: the installed package, not the tree's, on the path)
pip_target() (
    unset PYTHONPATH
    cp -r "$SRC" "$T/src-target" && rm -rf "$T/src-target/build" "$T/src-target"/*.egg-info
    "$PY" -m pip install --no-deps --no-build-isolation --target "$T/site" "$T/src-target" >"$T/pip1.log" 2>&1 ||
        { echo "  pip --target: $(tail -3 "$T/pip1.log")" >&2; return 1; }
    (cd "$T" && PYTHONPATH=$T/site "$PY" -c 'import poolscope, poolscope.torch, sys; print(poolscope.__file__); print(poolscope.active())') \
        >"$T/pip1.out" || return 1
    [ "$(head -1 "$T/pip1.out")" = "$T/site/poolscope/__init__.py" ] && [ "$(sed -n 2p "$T/pip1.out")" = False ]
)
check python_pip_install_target_offline pip_target

pip_venv() (
    unset PYTHONPATH
    cp -r "$SRC" "$T/src-venv" && rm -rf "$T/src-venv/build" "$T/src-venv"/*.egg-info
    "$PY" -m venv --system-site-packages "$T/venv" >"$T/venv.log" 2>&1 &&
        "$T/venv/bin/python" -m pip install --no-deps --no-build-isolation "$T/src-venv" >"$T/pip2.log" 2>&1 ||
        { echo "  venv pip: $(tail -3 "$T/venv.log" "$T/pip2.log")" >&2; return 1; }
    (cd "$T" && "$T/venv/bin/python" -c 'import poolscope; print(poolscope.__file__)') >"$T/pip2.out" &&
        grep -q "^$T/venv/lib/" "$T/pip2.out" || return 1
    cd "$T" && rec pyvenv "$T/venv/bin/python" "$TP/markers.py" 5 && markers_match pyvenv
)
check python_pip_install_venv_records pip_venv

exit $status
