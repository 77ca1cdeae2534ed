#!/bin/sh
# poolscope top in a real terminal (tmux, 80x24): its figures are report's
# on the same finished trace (heap live = leaked_bytes and leaked_objects,
# peak live, events, the sites by live bytes with their labels); q and
# Ctrl-C quit with status 0 and the terminal as it was (stty settings, the
# shell's screen back); on a trace being written it says so and moves on;
# --once prints the frame the terminal showed.
. tests/integration/lib.sh

command -v tmux >/dev/null || { echo "not ok top: tmux missing (scripts/deps.sh installs it)"; exit 1; }
SOCK="poolscope-top-$$"
tm() { tmux -L "$SOCK" "$@"; }
trap 'tm kill-server 2>/dev/null; rm -rf "$T"' EXIT

# wait_pane RE: up to 20 s for the pane to show a line matching RE
wait_pane() {
    i=0
    while ! tm capture-pane -p -t top 2>/dev/null | grep -q "$1"; do
        i=$((i + 1)); [ $i -gt 400 ] && { echo "  pane never showed '$1':" >&2; tm capture-pane -p -t top >&2; return 1; }
        sleep 0.05
    done
}
wait_file() {
    i=0
    while [ ! -s "$1" ]; do i=$((i + 1)); [ $i -gt 400 ] && return 1; sleep 0.05; done
}

# a finished trace with something live at its end: a window of a run
"$PS" record --duration 0.5 -o "$T/t.pst" -- "$P/window" 3000 24 1000 >/dev/null 2>&1
"$PS" report --json --no-default-suppressions "$T/t.pst" >"$T/r.json" 2>/dev/null   # top suppresses nothing

# a shell in an 80x24 terminal; top runs in it as a person would run it
tm -f /dev/null new-session -d -s top -x 80 -y 24 "env PS1='$ ' sh"
tm send-keys -t top "cd '$T' && stty -g >before && echo rea''dy1" Enter
wait_pane 'ready1'
tm send-keys -t top "clear; '$PS' top t.pst; echo top-exit=\$? >exit.q; stty -g >after.q; echo ba''ck1" Enter
wait_pane 'top sites by live bytes'
tm capture-pane -p -t top >"$T/screen.txt"
tm send-keys -t top q
wait_file "$T/exit.q"; wait_pane 'back1'
check "q: exit 0" grep -qx 'top-exit=0' "$T/exit.q"
check "q: terminal settings restored" cmp -s "$T/before" "$T/after.q"
tm capture-pane -p -t top >"$T/after-q.txt"
check "q: the shell's screen is back" sh -c "! grep -q 'top sites by live bytes' '$T/after-q.txt'"

check "fits 80x24" sh -c "test \$(wc -l <'$T/screen.txt') -le 24 && ! awk 'length > 80' '$T/screen.txt' | grep -q ."
python3 - "$T/screen.txt" "$T/r.json" <<'EOF' >"$T/cmp.txt" 2>&1
import json, re, sys
scr = open(sys.argv[1]).read().splitlines()
r = json.load(open(sys.argv[2]))
n = lambda s: int(s.replace(",", ""))
bad = []
m = next((re.search(r"heap live ([\d,]+) B in ([\d,]+) objects; peak ([\d,]+) B", l) for l in scr if "B in" in l), None)
if not m: bad.append("no exact heap line")
else:
    for got, key in zip(m.groups(), ("leaked_bytes", "leaked_objects", "peak_live_bytes")):
        if n(got) != r[key]: bad.append(f"{key}: top {n(got)}, report {r[key]}")
ev = next((re.search(r": ([\d,]+) events", l) for l in scr if " events," in l), None)
if not ev or n(ev.group(1)) != r["events_total"]: bad.append(f"events: top {ev and ev.group(1)}, report {r['events_total']}")
i = next(k for k, l in enumerate(scr) if "top sites by live bytes" in l)
rows = [re.match(r"\s+([\d,]+)\s+([\d,]+)  (.*)$", l) for l in scr[i + 1:]]
rows = [x for x in rows if x]
want = [s for s in r["sites"]["leaks"]][:len(rows)]
if not rows: bad.append("no site rows")
for x, w in zip(rows, want):
    label = w["site"] + (" via " + w["via"] if w.get("via") else "")
    shown = x.group(3)
    shown = shown[:-3] if shown.endswith("...") else shown
    if n(x.group(1)) != w["leaked_bytes"] or not label.startswith(shown):
        bad.append(f"site: top {x.group(1)} {shown!r}, report {w['leaked_bytes']} {label!r}")
print("\n".join(bad) or f"{len(rows)} sites, heap and events equal")
sys.exit(1 if bad else 0)
EOF
rc=$?; sed 's/^/  /' "$T/cmp.txt"
check "top's figures equal report --json" test $rc -eq 0

(cd "$T" && "$PS" top --once t.pst) >"$T/once.txt"
# the pane is padded with blank lines to its height; line 3 names the mode
strip() { sed '3d; s/ *$//' "$1" | awk 'NF { p = NR } { l[NR] = $0 } END { for (i = 1; i <= p; i++) print l[i] }'; }
strip "$T/screen.txt" >"$T/screen3.txt"
strip "$T/once.txt" >"$T/once3.txt"
check "--once prints the terminal's frame" cmp -s "$T/screen3.txt" "$T/once3.txt"

# RSS of a running program is never 0 B: its least over the last minute is
# the least sample, not a bucket before the first sample (the run has RSS:
# report's peak). In a 40-column terminal the site labels are cut with
# "...", not with a '>' that reads as a template's end; each cut row is a
# prefix of report's label.
python3 - "$T/screen.txt" "$T/r.json" <<'EOF' >"$T/rss.txt" 2>&1
import json, re, sys
scr = open(sys.argv[1]).read().splitlines()
r = json.load(open(sys.argv[2]))
row = next((l for l in scr if l.startswith("  RSS ")), "")
m = re.search(r"(\S+ \S+) \.\. ", row)
ok = r["peak_rss_bytes"] > 0 and m is not None and not m.group(1).startswith("0 ")
print(f"RSS row {row.strip()!r}, report peak {r['peak_rss_bytes']}")
sys.exit(0 if ok else 1)
EOF
rc=$?; sed 's/^/  /' "$T/rss.txt"
check "RSS least over the last minute is a sample, not 0 B" test $rc -eq 0
tm new-session -d -s narrow -x 40 -y 24 "env PS1='$ ' sh"
tm send-keys -t narrow "cd '$T' && clear && '$PS' top --once t.pst; echo na''rrow" Enter
i=0
until tm capture-pane -p -t narrow | grep -q '^narrow'; do i=$((i + 1)); [ $i -gt 400 ] && break; sleep 0.05; done
tm capture-pane -p -t narrow >"$T/narrow.txt"
tm kill-session -t narrow   # gone before "-t top" is asked for again
python3 - "$T/narrow.txt" "$T/r.json" <<'EOF' >"$T/narrow.cmp" 2>&1
import json, re, sys
scr = open(sys.argv[1]).read().splitlines()
r = json.load(open(sys.argv[2]))
i = next((k for k, l in enumerate(scr) if "top sites" in l), None)
bad = [] if i is not None else ["no sites header"]
rows = [re.match(r"\s+([\d,]+)\s+([\d,]+)  (.*)$", l) for l in scr[(i or 0) + 1:]]
rows = [x for x in rows if x]
cut = 0
for x, w in zip(rows, r["sites"]["leaks"]):
    label = w["site"] + (" via " + w["via"] if w.get("via") else "")
    shown = x.group(3)
    if len(x.group(0)) > 40: bad.append(f"wider than 40: {x.group(0)!r}")
    if shown.endswith("..."):
        cut += 1
        if not label.startswith(shown[:-3]): bad.append(f"cut {shown!r} is not a prefix of {label!r}")
    elif shown != label: bad.append(f"{shown!r} is neither {label!r} nor cut with ...")
if not cut: bad.append("no label was cut at 40 columns")
print("\n".join(bad) or f"{cut} of {len(rows)} labels cut with ...")
sys.exit(1 if bad else 0)
EOF
rc=$?; sed 's/^/  /' "$T/narrow.cmp"
check "labels cut to 40 columns end in ..." test $rc -eq 0

# Ctrl-C quits as cleanly as q
tm send-keys -t top "clear; '$PS' top t.pst; echo top-exit=\$? >exit.c; stty -g >after.c; echo ba''ck2" Enter
wait_pane 'top sites by live bytes'
tm send-keys -t top C-c
wait_file "$T/exit.c"; wait_pane 'back2'
check "Ctrl-C: exit 0" grep -qx 'top-exit=0' "$T/exit.c"
check "Ctrl-C: terminal settings restored" cmp -s "$T/before" "$T/after.c"

# Ctrl-Z gives the shell its terminal back as it was; fg brings the view back
tm send-keys -t top "clear; '$PS' top t.pst" Enter
wait_pane 'top sites by live bytes'
tm send-keys -t top C-z
wait_pane 'Stopped'
tm send-keys -t top "stty -g >during.z; echo sus''pended" Enter
wait_pane 'suspended'
tm capture-pane -p -t top >"$T/during-z.txt"
check "Ctrl-Z: the shell's terminal as it was" sh -c "cmp -s '$T/before' '$T/during.z' && ! grep -q 'top sites by live bytes' '$T/during-z.txt'"
tm send-keys -t top "fg; echo top-exit=\$? >exit.z; stty -g >after.z; echo ba''ck5" Enter
wait_pane 'top sites by live bytes'
tm send-keys -t top q
wait_file "$T/exit.z"; wait_pane 'back5'
check "Ctrl-Z, fg, q: exit 0, terminal restored" sh -c "grep -qx 'top-exit=0' '$T/exit.z' && cmp -s '$T/before' '$T/after.z'"

# a trace being written: said so, and the frame moves on with the program
tm send-keys -t top "clear; '$PS' record -o live.pst -- '$P/window' 6000 24 1000 >/dev/null 2>&1 & sleep 0.5; '$PS' top live.pst; echo ba''ck3" Enter
wait_pane 'still being written'
ev1=$(tm capture-pane -p -t top | sed -n 's/.*: \([0-9,]*\) events.*/\1/p' | head -1)
i=0; ev2=$ev1
while [ "$ev2" = "$ev1" ] && [ $i -lt 200 ]; do
    sleep 0.1; i=$((i + 1))
    ev2=$(tm capture-pane -p -t top | sed -n 's/.*: \([0-9,]*\) events.*/\1/p' | head -1)
done
check "live trace: said so, and refreshed ($ev1 -> $ev2 events)" test -n "$ev1" -a "$ev2" != "$ev1"
tm send-keys -t top q
wait_pane 'back3'
tm send-keys -t top "wait; echo do''ne4" Enter
wait_pane 'done4'

# top PID: the trace that process is writing
"$PS" record -o "$T/bypid.pst" -- "$P/window" 3000 8 1000 >/dev/null 2>&1 &
rpid=$!
wait_file "$T/bypid.pst"; sleep 0.3
wpid=$("$DUMP" "$T/bypid.pst" | sed -n 's/^pid=//p')
"$PS" top --once "$wpid" >"$T/bypid.txt" 2>&1
wait $rpid
check "top PID finds the trace it writes" sh -c "head -1 '$T/bypid.txt' | grep -q 'bypid.pst\$' && grep -q 'still being written' '$T/bypid.txt'"

check "usage: no file is exit 2" sh -c "'$PS' top >/dev/null 2>&1; test \$? -eq 2"
check "a missing trace is exit 2 before the screen" sh -c "'$PS' top --once '$T/nope.pst' >/dev/null 2>&1; test \$? -eq 2"
exit $status
