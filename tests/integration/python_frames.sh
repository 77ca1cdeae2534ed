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
#   allocator PYTHONMALLOC's settings and -X dev (the interpreter sets its
#             allocators again, after ours): the same lines as tracemalloc
#   exec'd    code made and freed by exec/compile (addresses reused): each
#             of 350 (file, line) holds the sizes that line allocated
#   packages  a/__init__.py and b/__init__.py: two rows, full paths in JSON
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

# lines_vs_tm NAME: report JSON $T/NAME.json of lines.py against tracemalloc
lines_vs_tm() {
    [ -s "$T/tm.txt" ] || "$PY" "$TP/lines.py" tracemalloc >"$T/tm.txt" || return 1
    for fn in small_bytes big_bytearray dict_of_strings; do
        l=lines.py:$(line_of lines.py $fn)
        want=$(awk -v k="$l" '$1 == k { print $2 }' "$T/tm.txt")
        got=$(site_bytes "$T/$1.json" "$l" peak_bytes)
        [ -n "$want" ] && [ "$want" -gt 0 ] || { echo "  tracemalloc has no $l: $(cat "$T/tm.txt")" >&2; return 1; }
        echo "  $l: tracemalloc $want, report live at peak $got" >&2
        awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.10 * b) }' ||
            { echo "  $l: more than 10% apart" >&2; return 1; }
    done
    # one row per Python line: never the same label twice (with and without a via)
    "$PY" - "$T/$1.json" <<'PYEOF'
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["sites"]["by_bytes"] if "python_file" in r]
sites = [r["site"] for r in rows]
bad = [r for r in rows if "via" in r] + [s for s in set(sites) if sites.count(s) > 1]
sys.exit("  Python rows with a via or twice: %s" % bad[:3] if bad or not rows else 0)
PYEOF
}

lines_match_tracemalloc() {
    rec lines lines.py && lines_vs_tm lines
}

# PYTHONMALLOC=pymalloc|debug|pymalloc_debug and -X dev: the interpreter
# sets its allocators again after our constructor wrapped them
allocator_modes() {
    for mode in PYTHONMALLOC=pymalloc PYTHONMALLOC=debug PYTHONMALLOC=pymalloc_debug PYTHONDEVMODE=1; do
        echo "  $mode:" >&2
        env "$mode" "$PS" record -o "$T/am.$mode.pst" -- "$PY" "$TP/lines.py" >/dev/null 2>"$T/am.err" &&
            "$PS" report --json --top 50 "$T/am.$mode.pst" >"$T/am.$mode.json" || { cat "$T/am.err" >&2; return 1; }
        lines_vs_tm "am.$mode" || return 1
        grep -q '"unknown_frees": 0,' "$T/am.$mode.json" || { grep unknown_frees "$T/am.$mode.json" >&2; return 1; }
    done
    # with --stacks none the arenas give it away: the same peak as without -X dev
    for x in "" "-X dev"; do
        "$PS" record --stacks none -o "$T/amn$x.pst" -- "$PY" $x "$TP/lines.py" >/dev/null 2>"$T/am.err" &&
            "$PS" report --json "$T/amn$x.pst" >"$T/amn$x.json" || { cat "$T/am.err" >&2; return 1; }
    done
    "$PY" - "$T/amn.json" "$T/amn-X dev.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(f))["peak_live_bytes"] for f in sys.argv[1:])
print("  --stacks none: peak %d, with -X dev %d" % (a, b), file=sys.stderr)
sys.exit(0 if abs(a - b) <= 0.02 * a else 1)
PYEOF
}

# exec'd code, freed at once: 350 (file, line) pairs, each holding its own
# sizes (dyncode.py's size()) and the bytearray object's few bytes beside
exec_code() {
    rec dyn dyncode.py || return 1
    "$PS" report --json --top 1000 "$T/dyn.pst" >"$T/dyn.json" || return 1
    "$PY" - "$T/dyn.json" <<'PYEOF'
import json, sys
from collections import Counter
N = 2100
count = Counter((i % 7, i % 50 + 1) for i in range(N))
rows = [r for r in json.load(open(sys.argv[1]))["sites"]["by_bytes"] if r.get("python_file", "").startswith("<gen")]
extra = Counter()
for r in rows:
    g, line = int(r["python_file"][4:-1]), r["python_line"]
    c = count[(g, line)]
    e = r["bytes"] - c * (200000 + 1000 * g + 7 * line + 1)   # bytearray(n) asks n + 1
    extra[e // c if 0 <= e < 200 * c else "off"] += 1
mode, n = extra.most_common(1)[0]
print("  %d (file, line) rows of 350; bytes beyond the sizes, per object: %s" % (len(rows), dict(extra)), file=sys.stderr)
sys.exit(0 if len(rows) == 350 and "off" not in extra and mode != "off" and n >= 340 else 1)
PYEOF
}

# two packages' __init__.py, the same line allocating: two rows, each
# label a tail of its own path, the whole path in the JSON
packages() {
    mkdir -p "$T/pk/a" "$T/pk/b"
    for p in a b; do
        printf 'def make(n):\n    return bytearray(n)\n' >"$T/pk/$p/__init__.py"
    done
    printf 'import a, b\nkeep = [a.make(3000000), b.make(5000000)]\n' >"$T/pk/main.py"
    PYTHONPATH="$T/pk" "$PS" record -o "$T/pk.pst" -- "$PY" "$T/pk/main.py" >/dev/null 2>"$T/pk.err" &&
        "$PS" report --json "$T/pk.pst" >"$T/pk.json" || { cat "$T/pk.err" >&2; return 1; }
    "$PY" - "$T/pk.json" <<'PYEOF'
import json, sys
rows = {r["python_file"]: r for r in json.load(open(sys.argv[1]))["sites"]["by_bytes"] if "python_file" in r}
for p, n in (("a", 3000000), ("b", 5000000)):
    r = next((r for f, r in rows.items() if f.endswith("/pk/%s/__init__.py" % p)), None)
    print("  %s: %s" % (p, r and (r["site"], r["bytes"])), file=sys.stderr)
    if not r or not r["site"].startswith("make (%s/__init__.py:2)" % p) or not n < r["bytes"] < n + 1024:
        sys.exit(1)
PYEOF
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
    # replay's --pool-sites by Python name and by file:line (those below
    # --pool-min: the rest go to the pool by size): none matched before
    for pat in Block.forward torch_lines.py:; do
        "$PS" replay --policy pool --pool-sites "$pat" --json "$T/torch.pst" >"$T/tps.json" || return 1
        got=$(grep -o '"site_calls": [0-9]*' "$T/tps.json" | head -1 | grep -o '[0-9]*$')
        echo "  replay --pool-sites $pat: $got calls taken by site" >&2
        [ "${got:-0}" -gt 0 ] || return 1
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
check python_frames_allocator_modes allocator_modes
check python_frames_exec_code exec_code
check python_frames_same_name_packages packages
check python_frames_python_c_python_layers layers
check python_frames_generator_thread_coroutine_exception flow
check python_frames_pymalloc_dict_on_its_line pymalloc_dict
check python_frames_torch_model_lines torch_lines
check python_frames_off_native_only frames_off
check python_frames_whole_stacks whole_stacks
exit $status
