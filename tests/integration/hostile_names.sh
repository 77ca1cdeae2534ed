#!/bin/sh
# hostile_names.sh — a trace is written by the traced program and shared
# between people, so no byte of its names may act when another person reads
# it (issue 25 items 2 and 8, issue 27's argv JSON):
#   - plot: a marker named `touch PWNED1` and a program path with
#     `touch PWNED2` run nothing (no PWNED file appears), the plot still
#     succeeds, and the marker lane and the title still show the names
#   - report, diff and replay text (stdout, warnings and errors on stderr):
#     no ESC (or other control byte) reaches the terminal; the names show
#     escaped (\x1b)
#   - report --json, replay --json, diff --json, export --format chrome, the
#     HTML report's data and the OpenMetrics text are valid for names with
#     ESC, BEL, DEL, C1 and bytes that are not UTF-8 (argv, program, marker,
#     pool, thread, module names): checked with python's strict UTF-8 decode
#     and json module, not with the analyzer's own reader
#   - a SYNC record claiming a tick gap of 2^63 ns or more: report neither
#     states it as a resolution ("within 18446744073.710 s") nor folds the
#     lifetimes by it
# The traces are made with the project's writer (include/poolscope/writer.h)
# by a generator built here, so the names are exactly the bytes written.
. tests/integration/lib.sh

D=$T/w
mkdir -p "$D/run"
cat > "$D/gen.c" <<'EOF'
/* gen OUT.pst DIR [gap]: a trace whose every name is hostile; commands in
 * names would create files in DIR. With "gap", a SYNC chunk claiming a tick
 * gap of 2^63 + 5 ns, and larger allocations (so diff has rows to show). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "poolscope/writer.h"

int main(int argc, char **argv)
{
    if (argc < 3) return 2;
    char exe[512], m1[512], m2[512];
    /* the program path: a backquote command, an OSC title sequence, a byte that is not UTF-8 */
    snprintf(exe, sizeof exe, "%s/`touch %s/PWNED2`\033]0;owned\007prog\377", argv[2], argv[2]);
    snprintf(m1, sizeof m1, "`touch %s/PWNED1`", argv[2]);
    snprintf(m2, sizeof m2, "$(touch %s/PWNED3)@x", argv[2]);
    const char *args[] = { exe, "\377\376argv", "a\033[31mred\033[0m", "del\177c1\302\233", NULL };
    pst_writer_cfg_t cfg = { .pid = 77, .exe = exe, .argv = args, .stacks = PST_STACKS_FP, .depth = 8 };
    int err = 0;
    pst_writer_t *w = pst_writer_open(argv[1], &cfg, &err);
    if (!w) return 1;
    pst_writer_module(w, 1, 0x400000, 0x100000, "/nonexistent/\033[31mevil\377.so", NULL, 0);
    uint64_t f1[] = { 0x401000, 0x402000 };
    uint32_t st = pst_writer_stack(w, f1, 2);
    uint32_t n1 = pst_writer_string(w, m1);
    uint32_t n2 = pst_writer_string(w, "\033[2J\033[31mclear\303\050");   /* ESC sequences, bad UTF-8 */
    uint32_t n3 = pst_writer_string(w, m2);
    uint32_t n4 = pst_writer_string(w, "q'\"\\ \t\n\001");
    uint32_t tn = pst_writer_string(w, "\033]2;thread\007\376");
    uint32_t pn = pst_writer_string(w, "\033[5mpool\377");
    pst_event_t ev;
    uint64_t t = 1000;
    pst_writer_time(w, t);
    PST_EMIT(w, 1, PST_EV_THREAD_NAME, tn);
    PST_EMIT(w, 1, PST_EV_POOL_CREATE, 1, pn, 3, 1 << 20);
    PST_EMIT(w, 1, PST_EV_POOL_BACKING_ALLOC, 1, 1, 0x9000000, 128);
    for (int i = 0; i < 40; i++) {
        uint32_t nm = i % 4 == 0 ? n1 : i % 4 == 1 ? n2 : i % 4 == 2 ? n3 : n4;
        pst_writer_time(w, t += 1000);
        PST_EMIT(w, 1, PST_EV_MARK_BEGIN, nm, (uint64_t)i, 0);
        memset(&ev, 0, sizeof ev);
        ev.type = PST_EV_MALLOC; ev.stack = st; ev.f[0] = 0x10000 + 64 * (uint64_t)i; ev.f[1] = (argc > 3 ? 300 : 100) + (uint64_t)i;
        pst_writer_event(w, 1, &ev);
        pst_writer_time(w, t += 500 + 100 * (uint64_t)i);
        PST_EMIT(w, 1, PST_EV_FREE, 0x10000 + 64 * (uint64_t)i);
        PST_EMIT(w, 1, PST_EV_MARK_END, nm, (uint64_t)i);
        PST_EMIT(w, 1, PST_EV_POOL_ACQUIRE, 1, 2 + 2 * (uint64_t)i, 0, 1, 25, 32, 100, 128, i > 0);
        PST_EMIT(w, 1, PST_EV_POOL_RECLAIM, 1, 3 + 2 * (uint64_t)i, 0, 1, 128, 1);
        if (argc > 3 && i == 20) {
            /* SYNC: watermark, tick gap, tracer bytes, tracer stream */
            uint8_t p[40], *q = p;
            q = pst_put_varint(q, t);
            q = pst_put_varint(q, (1ull << 63) + 5);
            q = pst_put_varint(q, 0);
            q = pst_put_varint(q, 0);
            pst_writer_flush(w);
            pst_writer_raw_chunk(w, PST_CHUNK_SYNC, 0, p, (uint32_t)(q - p));
        }
    }
    PST_EMIT(w, 1, PST_EV_MARK_POINT, n2, 0);
    return pst_writer_close(w) ? 1 : 0;
}
EOF
cc -std=c11 -D_GNU_SOURCE -O0 -I"$ROOT/include" -o "$D/gen" "$D/gen.c" "$B/lib/libpstrace.a" "$B/lib/libpscommon.a" \
    -lzstd -lz -ldl -pthread
check generator_builds [ -x "$D/gen" ]
R=$D/run
"$D/gen" "$D/h.pst" "$R" && "$D/gen" "$D/g.pst" "$R" gap
check hostile_traces_written sh -c "[ -s '$D/h.pst' ] && [ -s '$D/g.pst' ]"

# no_pwned [GLOB]: nothing a name holds was run (no PWNED* / GLOB file in $R)
no_pwned() {
    n=$(find "$R" -name "${1:-PWNED*}" | wc -l)
    [ "$n" -eq 0 ] || { echo "  ran: $(ls "$R")" >&2; rm -f "$R"/PWNED*; return 1; }
}
# no_control FILE: no C0 control byte but newline and tab, no DEL, no C1 as UTF-8 (ESC first of all)
no_control() {
    python3 - "$1" <<'PY'
import sys, re
b = open(sys.argv[1], 'rb').read()
m = re.search(rb'[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]', b)
if m:
    print('  %s: control byte %r at %d: %r' % (sys.argv[1], m.group(0), m.start(), b[max(0, m.start() - 40):m.start() + 20]), file=sys.stderr)
    sys.exit(1)
PY
}
# json_ok FILE [PY]: strict UTF-8, valid JSON, and PY (an expression over d) true
json_ok() {
    python3 - "$1" "${2:-True}" <<'PY'
import sys, json
raw = open(sys.argv[1], 'rb').read()
try:
    d = json.loads(raw.decode('utf-8', errors='strict'))
except Exception as e:
    print('  %s: %s' % (sys.argv[1], e), file=sys.stderr); sys.exit(1)
if not eval(sys.argv[2]):
    print('  %s: %s is false' % (sys.argv[1], sys.argv[2]), file=sys.stderr); sys.exit(1)
PY
}
utf8_ok() { python3 -c "import sys; open(sys.argv[1], 'rb').read().decode('utf-8', errors='strict')" "$1"; }

# ---- plot: nothing runs ------------------------------------------------------------
"$PS" plot "$D/h.pst" -o "$D/p" > "$D/plot.out" 2> "$D/plot.err"; rc=$?
check plot_succeeds sh -c "[ $rc -eq 0 ] && [ -s '$D/p/memory.png' ] && [ -s '$D/p/memory.svg' ]"
check plot_runs_no_backquote_command no_pwned
# the names are still drawn: the marker lane's tic label and the title hold them
check plot_marker_label_shown grep -q '\\140touch .*PWNED1\\140' "$D/p/memory.gp"
check plot_svg_shows_marker grep -q '`touch .*PWNED1`' "$D/p/memory.svg"
check plot_svg_shows_program grep -q '`touch .*PWNED2`' "$D/p/memory.svg"
check plot_script_has_no_raw_backquote_or_macro sh -c "! grep -n '[\`@]' '$D/p/memory.gp'"
check plot_script_no_control no_control "$D/p/memory.gp"
check plot_svg_utf8 utf8_ok "$D/p/memory.svg"
# the user's directory name is never gnuplot input: a backquote in it runs nothing
mkdir -p "$D/q\`touch $R/PWNED4\`"
"$PS" plot "$D/h.pst" -o "$D/q\`touch $R/PWNED4\`/out" > /dev/null 2>&1; rc=$?
check plot_output_dir_runs_nothing sh -c "[ $rc -eq 0 ] && [ -s '$D/q\`touch $R/PWNED4\`/out/memory.png' ]"
check plot_output_dir_no_pwned no_pwned PWNED4
# a replay file's policy and stream names (plot --replay)
printf '{"trace":{"stream":"`touch %s/PWNED5`"},"policies":[{"name":"`touch %s/PWNED6`\\"x","peak_reserved_bytes":100,"peak_live_bytes":50}]}\n' \
    "$R" "$R" > "$D/replay.json"
"$PS" plot --replay "$D/replay.json" -o "$D/pr" > /dev/null 2> "$D/pr.err"; rc=$?
check plot_replay_names_run_nothing sh -c "[ $rc -eq 0 ] && [ -s '$D/pr/policies.png' ]"
check plot_replay_no_pwned no_pwned "PWNED[56]"

# ---- text: no control byte reaches the terminal ----------------------------------------
"$PS" report "$D/h.pst" > "$D/report.txt" 2> "$D/report.err"
check report_text_runs [ -s "$D/report.txt" ]
check report_text_no_control no_control "$D/report.txt"
check report_stderr_no_control no_control "$D/report.err"
check report_text_shows_escaped grep -qF '\x1b[2J\x1b[31mclear\xc3(' "$D/report.txt"
check report_text_program_escaped grep -qF '\x1b]0;owned\x07prog\xff' "$D/report.txt"
"$PS" report "$D/h.pst" --full > "$D/full.txt" 2>&1
check report_full_no_control no_control "$D/full.txt"
"$PS" report "$D/h.pst" --phase "$(printf 'nosuch')" > /dev/null 2> "$D/phase.err"
# the error lists the trace's phases: escaped too
check report_phase_message_escaped sh -c "grep -qF '\\x1b[2J' '$D/phase.err'"
check report_phase_message_no_control no_control "$D/phase.err"
"$PS" diff "$D/h.pst" "$D/g.pst" --allow-incomplete > "$D/diff.txt" 2> "$D/diff.err"
check diff_text_runs grep -q '^diff ' "$D/diff.txt"
check diff_text_no_control no_control "$D/diff.txt"
check diff_text_shows_phase_escaped grep -qF 'phases.\x1b[2J\x1b[31mclear' "$D/diff.txt"
check diff_text_shows_site_escaped grep -qF '\x1b[31mevil' "$D/diff.txt"
# replay's table: its arena warning lists the trace's markers (on stdout and stderr)
"$PS" replay "$D/h.pst" > "$D/replay.txt" 2> "$D/replay.err"; rc=$?
check replay_text_runs sh -c "[ $rc -eq 0 ] && grep -q '^arena ' '$D/replay.txt'"
check replay_text_no_control no_control "$D/replay.txt"
check replay_stderr_no_control no_control "$D/replay.err"
check replay_warning_shows_marker_escaped grep -qF '\x1b[2J\x1b[31mclear\xc3( (scopes)' "$D/replay.txt"
# a hostile marker as the arena's reset marker: named in the arena's line
"$PS" replay "$D/h.pst" --policy arena --arena-reset "$(printf '\033[2J\033[31mclear\303\050')" \
    > "$D/replay_reset.txt" 2> "$D/replay_reset.err"; rc=$?
check replay_reset_marker_runs [ "$rc" -eq 0 ]
check replay_reset_marker_no_control no_control "$D/replay_reset.txt"
check replay_reset_marker_escaped grep -qF "outermost '\\x1b[2J\\x1b[31mclear\\xc3(' scope (10 opened)" "$D/replay_reset.txt"
# the error for a reset marker the trace lacks lists its markers: escaped too
"$PS" replay "$D/h.pst" --policy arena --arena-reset nosuch > /dev/null 2> "$D/replay_nosuch.err"
check replay_error_lists_markers_escaped grep -qF '\x1b[2J\x1b[31mclear' "$D/replay_nosuch.err"
check replay_error_no_control no_control "$D/replay_nosuch.err"

# ---- JSON and the other machine outputs: valid for any bytes ---------------------------------
"$PS" report "$D/h.pst" --json > "$D/report.json" 2> /dev/null
check report_json_valid json_ok "$D/report.json" "d['argv'][1] == '\ufffd\ufffdargv' and '\x1b[2J\x1b[31mclear\ufffd(' in d['phases']"
check report_json_program json_ok "$D/report.json" "'\x1b]0;owned\x07prog\ufffd' in d['program']"
check report_json_no_control no_control "$D/report.json"
"$PS" replay "$D/h.pst" --json > "$D/replay_out.json" 2> /dev/null
check replay_json_valid json_ok "$D/replay_out.json"
"$PS" diff "$D/h.pst" "$D/g.pst" --allow-incomplete --json > "$D/diff.json" 2> /dev/null
check diff_json_valid json_ok "$D/diff.json" "any('\x1b[2J' in m['metric'] for m in d['metrics'])"
"$PS" export "$D/h.pst" --format chrome -o "$D/h.chrome.json" > /dev/null 2>&1
check chrome_valid json_ok "$D/h.chrome.json" "any('\x1b[2J' in (e.get('name') or '') for e in d['traceEvents'])"
check chrome_thread_and_pool_names json_ok "$D/h.chrome.json" \
    "any(e.get('name') == 'thread_name' and 'thread' in e['args']['name'] for e in d['traceEvents'])"
"$PS" export "$D/h.pst" --format folded -o "$D/h.folded" > /dev/null 2>&1
check folded_no_control no_control "$D/h.folded"
"$PS" html "$D/h.pst" -o "$D/h.html" > /dev/null 2>&1
check html_utf8 utf8_ok "$D/h.html"
check html_data_valid python3 - "$D/h.html" <<'PY'
import sys, json, re
t = open(sys.argv[1], 'rb').read().decode('utf-8', errors='strict')
blocks = re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', t, re.S)
assert blocks, 'no data block'
for b in blocks:
    d = json.loads(b)
assert '\x1b' not in t, 'raw ESC in the page'
# the names are in the data, escaped as JSON
def strings(v):
    if isinstance(v, str): yield v
    elif isinstance(v, list):
        for x in v: yield from strings(x)
    elif isinstance(v, dict):
        for k, x in v.items(): yield k; yield from strings(x)
s = [x for b in blocks for x in strings(json.loads(b))]
assert any('\x1b[2J\x1b[31mclear\ufffd(' in x for x in s), 'marker name not in the data'
assert '\ufffd\ufffdargv' in s, 'argv not in the data'
PY
"$PS" report "$D/h.pst" --format openmetrics > "$D/h.om" 2> /dev/null
check openmetrics_utf8 utf8_ok "$D/h.om"
check openmetrics_no_control no_control "$D/h.om"
check openmetrics_labels_parse python3 - "$D/h.om" <<'PY'
import sys, re
# every sample line: name{label="value",...} number; values may hold only the
# exposition format's escapes \\ \" \n
lab = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
pat = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*\{' + lab + r'(?:,' + lab + r')*\} \S+$')
n = 0
for l in open(sys.argv[1], encoding='utf-8'):
    l = l.rstrip('\n')
    if l.startswith('#') or not l: continue
    assert pat.match(l), l
    n += 1
assert n > 10, n
PY
if command -v promtool > /dev/null 2>&1; then
    check openmetrics_promtool sh -c "promtool check metrics < '$D/h.om'"
fi

# ---- a SYNC tick gap of 2^63 ns or more ------------------------------------------------
"$PS" report "$D/g.pst" > "$D/gap.txt" 2> "$D/gap.err"; rc=$?
check gap_report_runs [ "$rc" -eq 0 ]
check gap_not_stated_as_resolution sh -c "! grep -q 'every event within' '$D/gap.txt'"
check gap_said_unknown grep -q 'resolution unknown' "$D/gap.txt"
check gap_lifetimes_not_folded sh -c "! grep -q 'below the trace.s time resolution' '$D/gap.txt'"
exit $status
