#!/bin/sh
# Progress of the commands that read a whole trace (issue 30, item 8), on a
# pseudo-terminal (util-linux `script`): each of report, html, export (the
# three formats), plot, sql, replay, diff, gate and top --once counts
# events against the trace's own total, and that total is the number of
# events pstdump reads (whose malloc and free counts are the program's
# own); every line's percentage is its count over that total, counts never
# go back, the last line is 100% of the total, and the line is cleared at
# the end, before anything else is printed. A trace cut short (no END) and
# one still being written show the share of bytes, marked '~', and say
# why; a narrow terminal gets lines that fit. With stderr a file or a
# pipe, the same commands print no progress at all.
. tests/integration/lib.sh

command -v script >/dev/null || { echo "not ok progress: script (util-linux) missing"; exit 1; }
cd "$T" || exit 1

# a finished trace of about a million events (15 lines of progress at most)
"$PS" record --stacks none -o t.pst -- "$P/churn" 1000000 >churn.out 2>/dev/null
"$DUMP" t.pst >t.dump
N=$(key t.dump events)
check progress_trace_counts [ "$(key t.dump complete)" = 1 ] &&
    [ "mallocs=$(key t.dump malloc) frees=$(key t.dump free)" = "$(cat churn.out)" ] &&
    [ "$N" -gt 500000 ]
"$PS" report --json t.pst >base.json 2>/dev/null

# tty NAME ARGS...: the command with stderr on a pseudo-terminal (stdout
# to NAME.out); what the terminal got goes to NAME.tty
tty_run() {
    tn=$1; shift
    script -qfec "$(printf "'%s' " "$PS" "$@") >$tn.out" /dev/null </dev/null >"$tn.tty"
}

# progress_ok FILE TOTAL SWEEPS: the capture's progress lines (see above)
progress_ok() {
    python3 - "$@" <<'EOF'
import re, sys
path, total, sweeps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
text = open(path, 'rb').read().decode('utf-8', 'replace')
line = re.compile(r'poolscope (\w+): [^\r\n]*?: +(\d+\.\d)% \(([\d,]+) of ([\d,]+) events\)\x1b\[K$')
segs = text.split('\r')
found, done, prev, bad = 0, 0, -1, []
for i, seg in enumerate(segs):
    seg = seg.rstrip('\n')
    m = line.match(seg)
    if not m:
        if re.search(r'events\)|% by bytes', seg): bad.append('not a whole progress line: %r' % seg)
        continue
    found += 1
    pct, n, tot = float(m.group(2)), int(m.group(3).replace(',', '')), int(m.group(4).replace(',', ''))
    if tot != total: bad.append('total %d, the trace has %d' % (tot, total))
    if abs(pct - 100.0 * n / total) > 0.051: bad.append('%.1f%% for %d of %d' % (pct, n, total))
    if n < prev: bad.append('count went back: %d after %d' % (n, prev))
    prev = n
    if n == total:
        done += 1
        prev = -1                      # diff reads a second trace
        # cleared at once: the next thing on the terminal is the erase
        nxt = segs[i + 1] if i + 1 < len(segs) else ''
        if not nxt.startswith('\x1b[K'): bad.append('not cleared after 100%%: %r' % nxt[:60])
if not found: bad.append('no progress line in %r' % text[:200])
if done != sweeps: bad.append('%d lines at 100%% of %d, want %d' % (done, total, sweeps))
if re.search(r'events\)\x1b\[K[^\r]*$', text): bad.append('the capture ends on a progress line')
for b in bad[:5]: print('  ' + path + ': ' + b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}

# quiet_ok NAME ARGS...: stderr a file, then a pipe: no progress in either
quiet_ok() {
    qn=$1; shift
    "$PS" "$@" >"$qn.fout" 2>"$qn.ferr"
    { "$PS" "$@" 2>&1 >"$qn.pout"; } | cat >"$qn.perr"
    for f in "$qn.ferr" "$qn.perr"; do
        if grep -q "$(printf '\r')\|$(printf '\033')\|events)\|by bytes" "$f"; then
            echo "  $f: progress without a terminal: $(head -c 200 "$f")" >&2
            return 1
        fi
    done
}

while read -r label sweeps args; do
    # shellcheck disable=SC2086  # the arguments are words
    tty_run "$label" $args
    check "progress_tty_$label" progress_ok "$label.tty" "$N" "$sweeps"
    # shellcheck disable=SC2086
    check "progress_quiet_$label" quiet_ok "$label" $args
done <<'EOF'
report 1 report t.pst
html 1 html t.pst -o t.html
export_chrome 1 export t.pst --format chrome -o t.json
export_folded 1 export t.pst --format folded -o t.folded
export_pprof 1 export t.pst --format pprof -o t.pb.gz
plot 1 plot t.pst -o plots
sql 1 sql t.pst -o t.sqlite
replay 1 replay t.pst --policy malloc,ideal
diff 2 diff t.pst t.pst
gate 1 gate t.pst --baseline base.json
top 1 top --once t.pst
EOF

# estimate_ok FILE WHY MAX: lines by bytes ('~', at most 100%), saying WHY,
# at most MAX events, none claiming a total; cleared at the end
estimate_ok() {
    python3 - "$@" <<'EOF'
import re, sys
path, why, most = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = open(path, 'rb').read().decode('utf-8', 'replace')
line = re.compile(r'poolscope report: [^\r\n]*?: ~(\d+\.\d)% by bytes, ([\d,]+) events \((.*?)\)\x1b\[K$')
found, bad = 0, []
for seg in text.split('\r'):
    seg = seg.rstrip('\n')
    m = line.match(seg)
    if not m:
        if re.search(r' of [\d,]+ events|by bytes', seg): bad.append('unexpected %r' % seg)
        continue
    found += 1
    if float(m.group(1)) > 100: bad.append('over 100%: ' + seg)
    if int(m.group(2).replace(',', '')) > most: bad.append('more events than the trace: ' + seg)
    if m.group(3) != why: bad.append('says (%s), want (%s)' % (m.group(3), why))
if not found: bad.append('no progress line in %r' % text[:200])
if re.search(r'events \([^)]*\)\x1b\[K[^\r]*$', text): bad.append('the capture ends on a progress line')
for b in bad[:5]: print('  ' + path + ': ' + b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}

# cut short: the first two thirds of a bigger trace's bytes, no END
"$PS" record --stacks none -o big.pst -- "$P/churn" 3000000 >/dev/null 2>&1
head -c $(($(wc -c <big.pst) * 2 / 3)) big.pst >cut.pst
"$DUMP" big.pst >big.dump
BIG=$(key big.dump events)
tty_run cut report cut.pst
check progress_cut_short estimate_ok cut.tty "no END" "$BIG"
# ... and its warning on a line of its own (the progress line cleared first)
check progress_cut_warning_clean grep -q "$(printf '\r\033')\[Kpoolscope report: cut.pst: warning: trace is cut short" cut.tty

# still being written: a run that goes on for seconds after its trace holds
# more than 65,536 events (one progress call); waited for by its size
"$PS" record --stacks none -o live.pst -- "$P/window" 100000 24 100 >/dev/null 2>&1 &
rec=$!
i=0
while n=$("$DUMP" live.pst 2>/dev/null | sed -n 's/^events=//p'); [ "${n:-0}" -lt 70000 ]; do
    i=$((i + 1)); [ $i -gt 300 ] && break
    sleep 0.1
done
tty_run live report live.pst
kill "$rec" 2>/dev/null
wait "$rec" 2>/dev/null
check progress_being_written estimate_ok live.tty "being written" 200100

# a narrow terminal and a long file name: every line fits in 49 columns
mkdir -p a-directory-with-a-rather-long-name-for-a-progress-line
cp t.pst a-directory-with-a-rather-long-name-for-a-progress-line/trace.pst
script -qfec "stty cols 50; '$PS' report a-directory-with-a-rather-long-name-for-a-progress-line/trace.pst >/dev/null" \
    /dev/null </dev/null >narrow.tty
narrow_ok() {
    python3 - narrow.tty <<'EOF'
import re, sys
text = open(sys.argv[1], 'rb').read().decode('utf-8', 'replace')
segs = [re.sub(r'\x1b\[K', '', s).rstrip('\n') for s in text.split('\r')]
prog = [s for s in segs if 'events)' in s]
long = [s for s in prog if len(s) > 49]
if not prog or long:
    print('  narrow.tty: %d lines, too wide: %r' % (len(prog), long[:2]), file=sys.stderr)
    sys.exit(1)
EOF
}
check progress_narrow_terminal narrow_ok

exit $status
