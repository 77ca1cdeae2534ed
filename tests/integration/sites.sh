#!/bin/sh
# sites.sh — allocation sites as a reader sees them (issue 13): every
# displayed frame (function, file, line, inline chain) equals addr2line's
# on the recorded address minus one; C++ names demangled in report, folded
# and chrome output; wrappers skipped with "via"; rows and folded lines
# by what is displayed; folded frames with file:line (--lines) and no
# symbol versions; stacks recorded without a --stacks flag; the note on
# frame-pointer stacks cut short. Expected lines come from the sources'
# markers and from addr2line, never from poolscope itself.
. tests/integration/lib.sh
A2L="python3 $ROOT/tests/integration/sites_addr2line.py"
line_of() { grep -n "/[*/] $2\( \*/\)\{0,1\}$" "$ROOT/$1" | head -1 | cut -d: -f1; }   # FILE MARKER: the line ending in that comment

# ---- lines and inline chains (tests/progs/sites_inline.c, built -O2) ----
"$PS" record --stacks fp -o "$T/inl.pst" -- "$P/sites_inline" >/dev/null 2>&1
"$PS" report "$T/inl.pst" --top 20 >"$T/inl.txt"
"$PS" sql "$T/inl.pst" -o "$T/inl.db" >/dev/null
check inline_every_frame_equals_addr2line $A2L "$T/inl.db" 10
LI=$(line_of tests/progs/sites_inline.c SITE_INLINE) LA=$(line_of tests/progs/sites_inline.c SITE_LINE_A)
LB=$(line_of tests/progs/sites_inline.c SITE_LINE_B) LC=$(line_of tests/progs/sites_inline.c SITE_LINE_C)
check inline_chain_in_report grep -q "helper_inner (sites_inline.c:$LI) \[inlined\] < helper_outer \[inlined\]" "$T/inl.txt"
consecutive() {
    for l in $LA $LB $LC; do
        grep -q "  lines (sites_inline.c:$l) < caller$" "$T/inl.txt" || { echo "  no row at line $l:" >&2; cat "$T/inl.txt" >&2; return 1; }
    done
}
check consecutive_lines_each_their_own consecutive
inline_full() {
    "$PS" report "$T/inl.pst" --full >"$T/inl-full.txt" &&
        grep -A3 "helper_inner (sites_inline.c:$LI) \[inlined\] <" "$T/inl-full.txt" | head -4 >"$T/chain" &&
        grep -q "helper_outer (sites_inline.c:$(line_of tests/progs/sites_inline.c SITE_INLINE_CALL)) \[inlined\]" "$T/chain" &&
        grep -q "outer (sites_inline.c:$(line_of tests/progs/sites_inline.c SITE_OUTER_CALL))$" "$T/chain" ||
        { cat "$T/chain" >&2; return 1; }
}
check full_stack_shows_inline_chain inline_full
folded_inlined() {
    "$PS" export "$T/inl.pst" --format folded -o "$T/inl.folded" &&
        grep -q ';outer;helper_outer_\[i\];helper_inner_\[i\] [0-9]*$' "$T/inl.folded"
}
check folded_marks_inlined folded_inlined
folded_lines() {
    "$PS" export "$T/inl.pst" --format folded --lines -o "$T/inl-lines.folded" || return 1
    LO=$(line_of tests/progs/sites_inline.c SITE_OUTER_CALL) LIC=$(line_of tests/progs/sites_inline.c SITE_INLINE_CALL)
    C1=$(line_of tests/progs/sites_inline.c SITE_CALLER_1)
    grep -qF ";outer (sites_inline.c:$LO);helper_outer (sites_inline.c:$LIC)_[i];helper_inner (sites_inline.c:$LI)_[i] " \
        "$T/inl-lines.folded" &&
        grep -qF ";caller (sites_inline.c:$C1);lines (sites_inline.c:$LA) " "$T/inl-lines.folded" &&
        grep -Eq '(^|;)main \(sites_inline\.c:[0-9]+\);' "$T/inl-lines.folded" ||
        { cat "$T/inl-lines.folded" >&2; return 1; }
    # no symbol versions (__libc_start_main@@GLIBC_2.34) in either form, nor
    # with dwarf stacks, which reach through libc's start to _start
    "$PS" record -o "$T/inl-dw.pst" -- "$P/sites_inline" >/dev/null 2>&1 &&
        "$PS" export "$T/inl-dw.pst" --format folded --lines -o "$T/inl-dw.folded" &&
        grep -q '^_start;' "$T/inl-dw.folded" || { cat "$T/inl-dw.folded" >&2; return 1; }
    ! grep -q '@@' "$T/inl-lines.folded" "$T/inl.folded" "$T/inl-dw.folded" ||
        { grep '@@' "$T/inl.folded" "$T/inl-lines.folded" "$T/inl-dw.folded" >&2; return 1; }
}
check folded_lines_file_and_line folded_lines

# ---- C++: demangled everywhere ----
cxx() {
    command -v g++ >/dev/null || { echo "  no g++: skipped" >&2; return 0; }
    g++ -std=c++17 -O1 -g -o "$T/cxx" "$ROOT/tests/cxx/sites_cxx.cpp" &&
        "$PS" record --stacks dwarf -o "$T/cxx.pst" -- "$T/cxx" >/dev/null 2>&1 &&
        "$PS" report --full "$T/cxx.pst" >"$T/cxx.txt" &&   # whole names (the default folds <…>)
        "$PS" export "$T/cxx.pst" --format folded -o "$T/cxx.folded" &&
        "$PS" export "$T/cxx.pst" --format chrome -o "$T/cxx.json" &&
        "$PS" sql "$T/cxx.pst" -o "$T/cxx.db" >/dev/null || return 1
    # what addr2line -C calls the functions, at the recorded addresses
    for want in 'infer::Tensor<float>::grow(unsigned long)' 'infer::Tensor<float>::Tensor(unsigned long)' \
                'infer::Arena::operator new(unsigned long)'; do
        grep -qF "$want" "$T/cxx.txt" || { echo "  report lacks $want" >&2; return 1; }
        grep -qF "$want" "$T/cxx.folded" || { echo "  folded lacks $want" >&2; return 1; }
    done
    python3 - "$T/cxx.json" <<'PY' || return 1
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in d['traceEvents'] if e.get('cat') == 'alloc']
text = json.dumps(ev)
assert any('infer::Tensor<float>::grow(unsigned long)' in e['args']['site'] for e in ev), text[:2000]
assert any('std::vector<float, std::allocator<float> >::resize(unsigned long)' in f
           for e in ev for f in e['args']['stack']), text[:2000]
PY
    ! grep -q '_Z[A-Za-z0-9_]*' "$T/cxx.txt" "$T/cxx.folded" && ! grep -q '"_Z' "$T/cxx.json" ||
        { echo "  a mangled name is left" >&2; return 1; }
    $A2L "$T/cxx.db" 10
}
check cxx_names_demangled_report_folded_chrome cxx

# ---- wrappers: three callers of a two-level wrapper ----
"$PS" record --stacks fp -o "$T/wrap.pst" -- "$P/sites_wrap" 10 >/dev/null 2>&1
wrap_rows() {
    "$PS" report "$T/wrap.pst" --skip-frame 'app_alloc*' --top 50 >"$T/wrap.txt" &&
        "$PS" report "$T/wrap.pst" --skip-frame 'app_alloc*' --json --top 50 >"$T/wrap.json" || return 1
    python3 - "$T/wrap.json" "$(line_of tests/progs/sites_wrap.c WRAP_SITE_1)" \
        "$(line_of tests/progs/sites_wrap.c WRAP_SITE_2)" "$(line_of tests/progs/sites_wrap.c WRAP_SITE_3)" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))['sites']['by_calls']
want = {'load_model (sites_wrap.c:%s)' % sys.argv[2]: 10, 'build_graph (sites_wrap.c:%s)' % sys.argv[3]: 20,
        'read_input (sites_wrap.c:%s)' % sys.argv[4]: 30}
via = [r for r in rows if r.get('via') == 'app_alloc']
assert len(via) == 3, rows
for r in via:
    fn = r['site'].split(' < ')[0]
    assert want.get(fn) == r['calls'], (fn, r, want)
    assert r['site'].endswith(' < main'), r
# load_model reaches the allocator through two lines of app_alloc: two stacks, one row
lm = [r for r in via if r['site'].startswith('load_model')][0]
assert lm['stacks'] == 2, lm
labels = [r['site'] + ' via ' + r.get('via', '') for r in rows]
assert len(labels) == len(set(labels)), labels
PY
}
check wrapper_three_rows_via wrap_rows
check wrapper_via_in_text grep -q "load_model (sites_wrap.c:[0-9]*) < main  via app_alloc$" "$T/wrap.txt"
wrap_folded() {
    "$PS" export "$T/wrap.pst" --format folded --weight calls --skip-frame 'app_alloc*' -o "$T/wrap.folded" || return 1
    [ "$(grep -c ';load_model [0-9]*$' "$T/wrap.folded")" = 1 ] && grep -q ';load_model 10$' "$T/wrap.folded" &&
        [ "$(cut -d' ' -f1 "$T/wrap.folded" | sort | uniq -d | wc -l)" = 0 ] || { cat "$T/wrap.folded" >&2; return 1; }
}
check folded_one_line_per_displayed_stack wrap_folded
check user_ps_function_named grep -q "ps_user_buffer (sites_wrap.c:$(line_of tests/progs/sites_wrap.c PS_USER_SITE)) < main" "$T/wrap.txt"
no_skip() {
    "$PS" report "$T/wrap.pst" --no-skip --skip-frame 'nothing-matches' >"$T/noskip.txt" &&
        grep -q "app_alloc_impl (sites_wrap.c:[0-9]*) < app_alloc" "$T/noskip.txt" &&
        ! grep -q " via " "$T/noskip.txt"
}
check no_skip_names_innermost no_skip
depth3() {
    "$PS" report "$T/wrap.pst" --skip-frame 'app_alloc*' --depth 3 >"$T/d3.txt" &&
        grep -q "read_input (sites_wrap.c:[0-9]*) < main < __libc_start_call_main  via app_alloc" "$T/d3.txt"
}
check depth_3_frames depth3

# ---- real traces: a sample of displayed frames against addr2line ----
# The demo's own run: its engine arguments from scripts/demo.sh, stacks as
# record takes them by default (as the demo does). Counted: every row of the
# frames table (each stack's displayed frames; a frame shared by stacks once
# per stack), at least 200, and at least 60 distinct frames (the demo has
# about 75 in all: refengine allocates from a few dozen places).
SHAPE= ENGINE_ARGS=
eval "$(grep -E '^(SHAPE|ENGINE_ARGS)=' "$ROOT/scripts/demo.sh")"
refengine_frames() {
    [ -n "$SHAPE" ] && [ -n "$ENGINE_ARGS" ] || { echo "  no SHAPE / ENGINE_ARGS in scripts/demo.sh" >&2; return 1; }
    # shellcheck disable=SC2086
    "$PS" record -o "$T/eng.pst" -- "$BIN/refengine" $ENGINE_ARGS >/dev/null 2>&1 &&
        "$PS" sql "$T/eng.pst" -o "$T/eng.db" >/dev/null && $A2L "$T/eng.db" 200 400 60
}
check demo_frames_equal_addr2line refengine_frames
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
python_frames() {
    [ -n "$PY" ] || { echo "  no python3: skipped" >&2; return 0; }
    printf 'import json\nd = {str(i): [i] * (i %% 5) for i in range(20000)}\nprint(len(json.dumps(d)))\n' >"$T/w.py"
    "$PS" record --stacks dwarf -o "$T/py.pst" -- "$PY" "$T/w.py" >/dev/null 2>&1 &&
        "$PS" sql "$T/py.pst" -o "$T/py.db" >/dev/null && $A2L "$T/py.db" 200 1500 200
}
check python3_dwarf_frames_equal_addr2line python_frames
demo_rows_distinct() {
    "$PS" report "$T/eng.pst" --json --top 1000 >"$T/eng.json" && python3 - "$T/eng.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))['sites']
for k, rows in s.items():
    labels = [r['site'] + ' via ' + r.get('via', '') for r in rows]
    assert len(labels) == len(set(labels)), (k, labels)
PY
}
check demo_no_two_rows_alike demo_rows_distinct

# ---- stacks without a flag; the note on fp stacks cut short ----
default_stacks() {
    "$PS" record -o "$T/dflt.pst" -- "$P/sites_wrap" 5 >/dev/null 2>&1 && "$DUMP" "$T/dflt.pst" >"$T/dflt.dump" || return 1
    [ "$(key "$T/dflt.dump" stack_events)" -ge "$(key "$T/dflt.dump" alloc_calls)" ] && [ "$(key "$T/dflt.dump" alloc_calls)" -ge 35 ] &&
        "$PS" report "$T/dflt.pst" >"$T/dflt.txt" && ! grep -q "(no stack)" "$T/dflt.txt" &&
        grep -q "app_alloc_impl (sites_wrap.c" "$T/dflt.txt" || { cat "$T/dflt.dump" >&2; return 1; }
}
check record_without_flag_records_stacks default_stacks
fp_note() {
    cc -std=c11 -O2 -g -fomit-frame-pointer -o "$T/wrap-nofp" "$ROOT/tests/progs/sites_wrap.c" &&
        "$PS" record --stacks fp -o "$T/nofp.pst" -- "$T/wrap-nofp" 10 >/dev/null 2>&1 &&
        "$PS" report "$T/nofp.pst" >"$T/nofp.txt" || return 1
    [ "$(grep -c 'record with --stacks dwarf' "$T/nofp.txt")" = 1 ] &&
        "$PS" report "$T/wrap.pst" >"$T/fp.txt" && ! grep -q 'record with --stacks dwarf' "$T/fp.txt" ||
        { cat "$T/nofp.txt" >&2; return 1; }
}
check fp_stacks_cut_short_noted_once fp_note
exit $status
