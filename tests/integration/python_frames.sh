# python_frames.sh — Python programs seen as Python (issue 26): the frames
# of recorded stacks name Python functions and lines, pymalloc's objects are
# heap calls, stacks are whole. Each figure is checked against an
# independent count:
#   lines     tracemalloc's bytes per line (the script measures itself) vs
#             the bytes report shows live at the peak on that line (10%)
#   layers    Python called back from C (sorted's key, qsort through
#             ctypes): the stack reads callback < C < caller, the C frame
#             named by libc's own symbol where it has one
#   pymalloc  a dict of 1 M small strings: its line holds >= 90% of the
#             bytes sys.getsizeof counts, and the object arenas are the
#             allocator's reserve, not the program's mappings
#   torch     the model's own forward lines name the tensors they make
#   layouts   the 3.11 offsets python.c reads, against CPython's headers
# Lines are found by grepping the fixtures for their LINE:name comments.
# Python is Debian's /usr/bin/python3 (3.11, with python3-torch).
. tests/integration/lib.sh

PY=${PYTHON:-/usr/bin/python3}
TP=$ROOT/tests/python
PYTHONPATH=$ROOT/python
export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH

line_of() { grep -n "LINE:$2\$" "$TP/$1" | cut -d: -f1; }

# rec NAME SCRIPT [record options]: $T/NAME.pst and report's JSON $T/NAME.json
rec() {
    n=$1 s=$2; shift 2
    "$PS" record "$@" -o "$T/$n.pst" -- "$PY" "$TP/$s" >"$T/$n.out" 2>"$T/$n.err" ||
        { echo "  $n: record failed: $(tail -3 "$T/$n.err")" >&2; return 1; }
    "$PS" report --json --top 50 "$T/$n.pst" >"$T/$n.json" 2>"$T/$n.rerr" ||
        { echo "  $n: report failed: $(tail -3 "$T/$n.rerr")" >&2; return 1; }
}

# site_bytes JSON FILE:LINE FIELD: FIELD summed over the sites named by that
# line (peak_bytes from the by_peak list, bytes from by_bytes)
site_bytes() {
    "$PY" - "$1" "$2" "$3" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
want = "(%s)" % sys.argv[2]
rows = d["sites"]["by_peak" if sys.argv[3] == "peak_bytes" else "by_bytes"]
print(sum(s[sys.argv[3]] for s in rows if s["site"].split(" < ")[0].endswith(want)))
PYEOF
}

layouts() {
    [ -f /usr/include/python3.11/internal/pycore_frame.h ] ||
        { echo "  no CPython 3.11 headers (python3.11-dev; scripts/deps.sh installs it)" >&2; return 1; }
    cc -std=c11 -D_GNU_SOURCE -I/usr/include/python3.11 -I"$ROOT/libtrace/preload" \
        "$TP/pyoffsets.c" -o "$T/pyoffsets" 2>"$T/pyoffsets.err" ||
        { echo "  py311.h disagrees with CPython's headers: $(grep error "$T/pyoffsets.err" | head -3)" >&2; return 1; }
    "$T/pyoffsets" | grep -qx 'state_bits=ok'
}

lines_match_tracemalloc() {
    "$PY" "$TP/lines.py" tracemalloc >"$T/tm.txt" || return 1
    rec lines lines.py || return 1
    for fn in small_bytes big_bytearray dict_of_strings; do
        l=lines.py:$(line_of lines.py $fn)
        want=$(awk -v k="$l" '$1 == k { print $2 }' "$T/tm.txt")
        got=$(site_bytes "$T/lines.json" "$l" peak_bytes)
        [ -n "$want" ] && [ "$want" -gt 0 ] || { echo "  tracemalloc has no $l: $(cat "$T/tm.txt")" >&2; return 1; }
        echo "  $l: tracemalloc $want, report live at peak $got" >&2
        awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.10 * b) }' ||
            { echo "  $l: more than 10% apart" >&2; return 1; }
    done
}

# The whole stack reads outer to inner; an awk over sql's frames table
# (level 0 innermost). Python frames have a .py file and no module.
frames_of_line() {   # DB FILE:LINE -> "python|native name" per frame, innermost first, of the first stack whose innermost Python frame is that line
    sqlite3 -separator ' ' "$1" "
      WITH py AS (SELECT stack_id, min(level) lv FROM frames WHERE module IS NULL AND file LIKE '%.py' GROUP BY stack_id),
           hit AS (SELECT f.stack_id FROM frames f JOIN py ON f.stack_id = py.stack_id AND f.level = py.lv
                   WHERE f.file LIKE '%/$(echo "$2" | cut -d: -f1)' AND f.line = $(echo "$2" | cut -d: -f2) LIMIT 1)
      SELECT CASE WHEN module IS NULL AND file LIKE '%.py' THEN 'py:' || line ELSE 'c:' || coalesce(function, module) END
      FROM frames WHERE stack_id = (SELECT stack_id FROM hit) ORDER BY level"
}

layers() {
    rec cb callback.py || return 1
    "$PS" sql "$T/cb.pst" -o "$T/cb.db" >/dev/null 2>"$T/cb.sqlerr" || { cat "$T/cb.sqlerr" >&2; return 1; }
    for pair in key:sorted cmp:qsort; do
        inner=$(line_of callback.py "${pair%%:*}") outer=$(line_of callback.py "${pair#*:}")
        frames_of_line "$T/cb.db" "callback.py:$inner" >"$T/layers.$inner"
        # innermost Python frame at the callback's line, then C frames, then the caller's line
        awk -v i="py:$inner" -v o="py:$outer" -v want_c="${pair#*:}" '
            NR == 1 { next }
            !seen_in && $0 == i { seen_in = 1; next }
            seen_in && !seen_out && /^c:/ { c++; if (want_c == "qsort" && /qsort/) named = 1; next }
            seen_in && !seen_out && $0 == o { seen_out = 1 }
            END { exit !(seen_in && seen_out && c > 0 && (want_c != "qsort" || named)) }' "$T/layers.$inner" || {
            echo "  callback.py:$inner: not Python < C < Python (callback.py:$outer): $(head -40 "$T/layers.$inner" | tr '\n' ' ')" >&2
            return 1
        }
    done
}

# generators, threads, coroutines, exception handlers: each line under its own function
flow() {
    rec flow flow.py || return 1
    for pair in gen:gen thread:in_thread coro:coro except:handler after:main; do
        k=${pair%%:*} fn=${pair#*:}
        l=flow.py:$(line_of flow.py "$k")
        want=$(key "$T/flow.out" "$k")
        got=$("$PY" - "$T/flow.json" "$fn ($l)" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(sum(s["bytes"] for s in d["sites"]["by_bytes"] if s["site"].split(" < ")[0] == sys.argv[2]))
PYEOF
)
        # the buffers, and the few small objects around them (a bytearray's own 57 bytes)
        echo "  $fn ($l): $got bytes named there, the script's buffers $want" >&2
        [ "$got" -ge "$want" ] && [ "$got" -le $((want + 1024)) ] || return 1
    done
}

pymalloc_dict() {
    rec d1m dict1m.py || return 1
    l=dict1m.py:$(line_of dict1m.py dict)
    want=$(key "$T/d1m.out" getsizeof)
    got=$(site_bytes "$T/d1m.json" "$l" peak_bytes)
    peak=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_live_bytes"])' "$T/d1m.json")
    arena=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["peak_pymalloc_arena_bytes"], d["peak_mmap_anon_bytes"])' "$T/d1m.json")
    echo "  $l: getsizeof $want, report live at peak $got of $peak; arenas, anonymous mmap: $arena" >&2
    awk -v a="$got" -v b="$want" 'BEGIN { exit !(a >= 0.90 * b && a <= 1.10 * b) }' || return 1
    # the arenas (most of the bytes: every key and value is a small object)
    # are the allocator's reserve; the program's own mappings stay small
    set -- $arena
    [ "$1" -ge $((want / 2)) ] && [ "$2" -lt $((want / 4)) ]
}

torch_lines() {
    rec torch torch_lines.py || return 1
    for op in matmul residual; do
        l=torch_lines.py:$(line_of torch_lines.py $op)
        got=$(site_bytes "$T/torch.json" "$l" bytes)
        echo "  $l: $got bytes allocated" >&2
        [ "$got" -gt 0 ] || return 1
    done
    # the model's line is among the top 10 sites by bytes, of the run and of
    # poolscope.torch's "forward" scopes
    l="Block.forward (torch_lines.py:$(line_of torch_lines.py matmul))"
    "$PS" report --json --phase forward "$T/torch.pst" >"$T/torch.fwd.json" || return 1
    for j in "$T/torch.json" "$T/torch.fwd.json"; do
        "$PY" - "$j" "$l" <<'PYEOF' || { echo "  $l not in the top 10 by bytes of $j" >&2; return 1; }
import json, sys
rows = json.load(open(sys.argv[1]))["sites"]["by_bytes"][:10]
sys.exit(0 if any(r["site"].startswith(sys.argv[2]) for r in rows) else 1)
PYEOF
    done
}

# --python-frames off: native frames only, and the report names no .py line
frames_off() {
    rec off lines.py --python-frames off || return 1
    ! grep -q '\.py:[0-9]' "$T/off.json" && grep -q 'PyByteArray_Resize\|_PyEval_EvalFrameDefault' "$T/off.json"
}

# whole stacks: a Python process gets depth 128, and the report counts the cut ones
whole_stacks() {
    "$PS" report "$T/lines.pst" >"$T/lines.txt" &&
        grep -q '^  stacks .*none cut at the depth limit (128)' "$T/lines.txt" || {
        grep '^  stacks' "$T/lines.txt" >&2; return 1; }
}

# another CPython version (a program exporting Py_Version 3.12 and an
# evaluation function): one line from record, native frames, every malloc
other_version() {
    "$PS" record -o "$T/fake.pst" -- "$P/fake_python" >"$T/fake.out" 2>"$T/fake.err" || return 1
    [ "$(grep -c 'Python 3.12: Python frames and pymalloc events need CPython 3.11; native frames only' "$T/fake.err")" = 1 ] ||
        { cat "$T/fake.err" >&2; return 1; }
    "$PS" report --json "$T/fake.pst" >"$T/fake.json" || return 1
    want=$(key "$T/fake.out" mallocs)
    "$PY" - "$T/fake.json" "$want" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
n = sum(s["calls"] for s in d["sites"]["by_calls"] if s["site"].startswith("_PyEval_EvalFrameDefault"))
sys.exit(0 if n == int(sys.argv[2]) else 1)
PYEOF
}

check python_frames_layouts_match_cpython_headers layouts
check python_frames_other_version_says_so other_version
check python_frames_lines_match_tracemalloc lines_match_tracemalloc
check python_frames_python_c_python_layers layers
check python_frames_generator_thread_coroutine_exception flow
check python_frames_pymalloc_dict_on_its_line pymalloc_dict
check python_frames_torch_model_lines torch_lines
check python_frames_off_native_only frames_off
check python_frames_whole_stacks whole_stacks
exit $status
