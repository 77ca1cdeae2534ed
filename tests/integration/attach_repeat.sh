#!/bin/sh
# attach_repeat.sh — `poolscope attach` and detach 20 times in a row on one
# server (tests/progs/att_server, run until a stop file appears): it keeps
# running, its own checks pass and its output is the unattached run's
# (every live block still holds its worker's bytes, the sizes of all its
# calls add up); every window is a complete trace of its own with calls
# from every worker and no unknown free; the server has as many mappings
# after the last detach as after the fifth, and its RSS stays within a
# bound of what it was then. The server's own heap grows for its first
# seconds (blocks of up to 256 KiB come and go) and then moves by about
# 5 MiB: the bound is 8 MiB on the least of 10 samples, from the fifth
# window on (an attach takes about 10 ms, so the first one comes before
# that growth has ended). Each attach leaves nothing in the process: its
# strings are on the stopped thread's stack (libtrace/inject.c).
. tests/integration/lib.sh

NT=4 LIVE=100 N=${ATTACH_REPEAT:-20}
S=$P/att_server
( sleep 0.3; touch "$T/stop0" ) &
"$S" $NT $LIVE 0 "$T/stop0" > "$T/plain.out" 2>/dev/null
check plain_run grep -qx "threads=$NT live=$LIVE checked=ok" "$T/plain.out"

"$S" $NT $LIVE 0 "$T/stop" > "$T/srv.out" 2> "$T/srv.err" &
SP=$!
wait_line "$T/srv.err" '^ready' $SP
rss() { # the least of 10 samples 50 ms apart, kB
    for k in 1 2 3 4 5 6 7 8 9 10; do
        sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/$SP/status
        sleep 0.05
    done | sort -n | head -1
}
maps() { wc -l < /proc/$SP/maps; }
fails=0 bad=0
for i in $(seq 1 $N); do
    "$PS" attach $SP -o "$T/w$i.pst" --stacks none --duration 0.3 2> "$T/w$i.err" || fails=$((fails + 1))
    [ $i -eq 5 ] && { rss1=$(rss); maps1=$(maps); }
    "$PS" report "$T/w$i.pst" --json --no-symbols 2>/dev/null | python3 -c "
import json, sys; d = json.load(sys.stdin)
assert d['attach'] and d['complete'] and d['unknown_frees'] == 0 and d['threads'] >= $NT and d['calls']['malloc'] > 0, d" \
        || { bad=$((bad + 1)); sed 's/^/  /' "$T/w$i.err"; }
done
rssN=$(rss); mapsN=$(maps)
kill -0 $SP 2>/dev/null
check server_running_after_${N}_windows [ $? -eq 0 ]
check every_attach_exit_0 [ $fails -eq 0 ]
check every_window_complete [ $bad -eq 0 ]
echo "  after the fifth detach: RSS ${rss1} kB, ${maps1} mappings; after the last: ${rssN} kB, ${mapsN} mappings"
check mappings_not_growing [ "$mapsN" -le $((maps1 + 4)) ]
check rss_not_growing [ $((rssN - rss1)) -le 8192 ]
touch "$T/stop"
wait $SP; src=$?
check server_exit_0 [ $src -eq 0 ]
check server_output_unchanged cmp -s "$T/plain.out" "$T/srv.out"
grep -h 'attached to pid' "$T"/w*.err | sed 's/.* in \([0-9.]*\) s,.*/\1/' | sort -n | awk '{a[NR]=$1} END {if (NR) printf "  attach time: min %s s, median %s s, max %s s over %d\n", a[1], a[int((NR+1)/2)], a[NR], NR}'
exit $status
