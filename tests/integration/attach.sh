#!/bin/sh
# attach.sh — `poolscope attach PID` / `poolscope detach PID` on a server
# that was not started by poolscope (cli/cmd_attach.c, libtrace/preload/
# attach.c). tests/progs/att_server: worker threads that each keep LIVE
# blocks and replace one at a time, every malloc's size naming its worker
# and its op number modulo 4096; its output depends only on its arguments.
# Checked: the server runs on and prints what it prints unattached; the
# trace is an attach window (header ATTACH); in each worker's stream the
# mallocs are consecutive op numbers (no call of the window missing) and
# each is preceded by its free; frees of blocks from before the attach are
# "freed, allocated before attach", not unknown frees, and as many as the
# blocks live at detach (the live set is constant); refusals are one line.
. tests/integration/lib.sh

NT=4 LIVE=100 OPS=${ATTACH_OPS:-200000}
S=$P/att_server
"$S" $NT $LIVE $OPS > "$T/plain.out" 2> /dev/null
check plain_run grep -q "^threads=$NT live=$LIVE ops=$((NT * OPS)) " "$T/plain.out"

# start the server, wait for its live set, attach for 2 s
start_server() { # $1 = name
    "$S" $NT $LIVE $OPS > "$T/$1.out" 2> "$T/$1.err" &
    SP=$!
    wait_line "$T/$1.err" '^ready' $SP
}
start_server one
"$PS" attach $SP -o "$T/one.pst" --stacks none --duration 2 2> "$T/one.attach"; rc=$?
sed 's/^/  /' "$T/one.attach"
check attach_exit_0 [ $rc -eq 0 ]
kill -0 $SP 2>/dev/null
check server_still_running_after_detach [ $? -eq 0 ]
wait $SP; src=$?
check server_exit_0 [ $src -eq 0 ]
check server_output_unchanged cmp -s "$T/plain.out" "$T/one.out"

"$PS" report "$T/one.pst" --json --no-symbols > "$T/one.json" 2> "$T/one.rerr"
"$PS" report "$T/one.pst" --no-symbols > "$T/one.txt" 2>&1
check report_words_the_window sh -c "grep -q 'live at detach' '$T/one.txt' && grep -q 'freed, allocated before attach' '$T/one.txt' && ! grep -q 'unknown addresses' '$T/one.txt'"
check window_counts python3 - "$T/one.json" $NT $LIVE <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); nt, live = int(sys.argv[2]), int(sys.argv[3])
print('  window: %d mallocs, %d frees, freed before attach %d, live at detach %d' % (
    d['calls']['malloc'], d['calls']['free'], d['freed_before_attach'], d['leaked_objects']))
assert d['attach'] is True and d['stopped'] is True and d['complete'] is True, d
assert d['unknown_frees'] == 0 and d['lost_events'] == 0, d
# 2 s at about 16,000 ops a second per worker
assert d['calls']['malloc'] > 1000 * nt, d['calls']
# the live set is constant: what was freed of the old set is what the new
# one holds, but for a worker caught between its free and its malloc at
# either edge of the window (the free recorded, the malloc not, or the
# other way round)
assert 0 < d['freed_before_attach'] <= nt * live, d
assert abs(d['leaked_objects'] - d['freed_before_attach']) <= nt, d
assert nt * live - nt <= d['leaked_objects'] <= nt * live, d
PY
"$PS" sql "$T/one.pst" -o "$T/one.sqlite" > /dev/null 2>&1
check every_call_of_the_window python3 - "$T/one.sqlite" $NT <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); nt = int(sys.argv[2])
rows = db.execute("select stream, type_name, size_bytes from events where type_name in ('malloc','free') order by id").fetchall()
per = {}
for stream, name, size in rows:
    per.setdefault(stream, []).append((name, size))
workers = 0
for stream, evs in per.items():
    ms = [s for n, s in evs if n == 'malloc']
    if len(ms) < 100:
        continue
    workers += 1
    v = [s // 16 - 1 for s in ms]
    w = {x // 4096 for x in v}
    assert len(w) == 1, (stream, sorted(w)[:5])
    ks = [x % 4096 for x in v]
    gaps = [(i, ks[i - 1], ks[i]) for i in range(1, len(ks)) if ks[i] != (ks[i - 1] + 1) % 4096]
    assert not gaps, (stream, len(gaps), gaps[:3])
    # free, malloc, free, malloc ...: two calls of one name in a row only
    # where the window's edges fall between the patching (or the
    # restoring) of free's slot and malloc's, once at each end at most
    names = [n for n, _ in evs]
    twice = [i for i in range(1, len(names)) if names[i] == names[i - 1]]
    assert len(twice) <= 2 and all(i < 4 or i > len(names) - 4 for i in twice), (stream, twice[:5])
    print('  stream %d: worker %d, %d consecutive ops' % (stream, w.pop(), len(ms)))
assert workers == nt, workers
PY

# ended by `poolscope detach PID`, dwarf stacks (the default); then by
# Ctrl-C (SIGINT to attach)
start_server two
"$PS" attach $SP -o "$T/two.pst" 2> "$T/two.attach" &
AP=$!
wait_line "$T/two.attach" '^poolscope: attached' $AP
sleep 1
"$PS" detach $SP 2> "$T/two.detach"; drc=$?
wait $AP; arc=$?
check detach_ends_the_window sh -c "[ $drc -eq 0 ] && [ $arc -eq 0 ] && grep -q 'window ended (detach)' '$T/two.attach'"
"$PS" attach $SP -o "$T/three.pst" --stacks fp 2> "$T/three.attach" &
AP=$!
wait_line "$T/three.attach" '^poolscope: attached\|^poolscope: attach:' $AP
sleep 1
kill -INT $AP; wait $AP; arc=$?
wait $SP; src=$?
check second_attach_ends_by_ctrl_c sh -c "[ $arc -eq 0 ] && grep -q 'window ended (signal)' '$T/three.attach'"
check server_after_two_windows sh -c "[ $src -eq 0 ] && cmp -s '$T/plain.out' '$T/two.out'"
for w in two three; do
    "$PS" report "$T/$w.pst" --json > "$T/$w.json" 2>/dev/null
    check "${w}_window_complete" python3 -c "
import json; d = json.load(open('$T/$w.json'))
assert d['attach'] and d['complete'] and d['unknown_frees'] == 0 and d['calls']['malloc'] > 1000, d"
done
grep -q 'worker (att_server.c:[0-9]*)' "$T/two.json" 2>/dev/null || "$PS" report "$T/two.pst" | grep -q 'worker (att_server.c:[0-9]*)'
check window_stacks_symbolized [ $? -eq 0 ]

# python3: a loop whose live set is 1000 values, each holding one bytes
# of 2000 (the interpreter's malloc: what an attach sees; pymalloc's small
# objects are not); its frames are Python's
( sleep 0.3; touch "$T/pystop0" ) &
python3 "$ROOT/tests/python/att_loop.py" "$T/pystop0" > "$T/py.plain" 2>/dev/null
python3 "$ROOT/tests/python/att_loop.py" "$T/pystop" > "$T/py.out" 2> "$T/py.err" &
PYP=$!
wait_line "$T/py.err" '^ready' $PYP
"$PS" attach $PYP -o "$T/py.pst" --duration 1.5 2> "$T/py.attach"; rc=$?
kill -0 $PYP 2>/dev/null; alive=$?
touch "$T/pystop"
wait $PYP; prc=$?
check python_runs_on sh -c "[ $rc -eq 0 ] && [ $alive -eq 0 ] && [ $prc -eq 0 ] && grep -qx 'keys=1000 checked=ok' '$T/py.out' && cmp -s '$T/py.plain' '$T/py.out'"
"$PS" report "$T/py.pst" --json > "$T/py.json" 2>/dev/null
check python_window python3 - "$T/py.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
big = [s for s in d['sites']['by_calls'] if 'att_loop.py' in s['site']]
print('  python: %d calls of the loop line, freed before attach %d, live at detach %d' % (
    big[0]['calls'] if big else 0, d['freed_before_attach'], d['leaked_objects']))
assert d['attach'] and d['complete'] and d['unknown_frees'] == 0, d
assert big and big[0]['calls'] > 1000, d['sites']['by_calls'][:3]
# the 1000 live bytes objects: the old ones freed, the new ones live
assert 0 < d['freed_before_attach'] <= 1000 + 50, d['freed_before_attach']
assert abs(d['leaked_objects'] - d['freed_before_attach']) <= 50, d
PY

# objects loaded during the window: a library dlopened and dlclosed again
# and again (tests/scope/att_dl_*.c); its slots are hooked within 10 ms
# of each load, its 10 mallocs of 12345 bytes come 50 ms after it
cc -O2 -shared -fPIC -o "$T/libattdl.so" "$ROOT/tests/scope/att_dl_lib.c" &&
    cc -O2 -o "$T/att_dl" "$ROOT/tests/scope/att_dl_main.c" -ldl
( sleep 0.3; touch "$T/dlstop0" ) &
"$T/att_dl" "$T/libattdl.so" "$T/dlstop0" > "$T/dl.plain" 2>/dev/null
"$T/att_dl" "$T/libattdl.so" "$T/dlstop" > "$T/dl.out" 2> "$T/dl.err" &
DP=$!
wait_line "$T/dl.err" '^ready' $DP
"$PS" attach $DP -o "$T/dl.pst" --stacks none --duration 1.5 2> "$T/dl.attach"; rc=$?
touch "$T/dlstop"
wait $DP; drc=$?
check dlopened_program_runs_on sh -c "[ $rc -eq 0 ] && [ $drc -eq 0 ] && grep -qx 'rounds>0=1 checked=ok' '$T/dl.out' && cmp -s '$T/dl.plain' '$T/dl.out'"
"$PS" sql "$T/dl.pst" -o "$T/dl.sqlite" > /dev/null 2>&1
check objects_loaded_in_the_window_hooked python3 - "$T/dl.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n = db.execute("select count(*) from allocations where size_bytes = 12345").fetchone()[0]
freed = db.execute("select count(*) from allocations where size_bytes = 12345 and free_ts_ns is not null").fetchone()[0]
print('  dlopened library: %d mallocs of 12345 bytes in the window, %d freed' % (n, freed))
# about 25 rounds of 10 in 1.5 s, each round's calls whole (a round cut
# by an edge of the window is the only exception)
assert n >= 50 and n - freed <= 10, (n, freed)
PY

# a thread that is inside malloc or free nearly all the time: attach lets
# it leave the allocator before calling dlopen in it; three windows in a
# row, the last with no gdb to be found (attach calls in by itself)
"$P/att_tight" "$T/tstop" > "$T/tight.out" 2> "$T/tight.err" &
TP=$!
wait_line "$T/tight.err" '^ready' $TP
tfail=0
for w in 1 2 3; do
    path=$PATH; [ $w -eq 3 ] && path=/nonexistent
    PATH=$path "$PS" attach $TP -o "$T/tight$w.pst" --stacks none --duration 0.5 2> "$T/tight$w.attach" || tfail=$((tfail + 1))
    "$PS" report "$T/tight$w.pst" --json --no-symbols 2>/dev/null | python3 -c "
import json, sys; d = json.load(sys.stdin); assert d['complete'] and d['calls']['malloc'] > 10000, d['calls']" || tfail=$((tfail + 1))
done
touch "$T/tstop"
wait $TP; trc=$?
check allocating_thread_attached_three_times sh -c "[ $tfail -eq 0 ] && [ $trc -eq 0 ] && grep -qx 'checked=ok' '$T/tight.out'"

# (1000 requests: about 6 s here, so the engine is still running when an
# attach that takes several seconds on a loaded machine begins its window)
# the event API: refengine's tensor events go through its ps__api pointer,
# filled before the attach; attach points it at the tracer, so the window
# has them, and the engine's output is the same as unattached
ENG=$B/bin/refengine
ENG_ARGS="--synthetic dim=128,layers=2,heads=4,kv_heads=2,hidden=320,vocab=1024,seq=256 --requests 1000
    --max-batch 4 --workload fixed:16,128 --block-size 4 --alloc pool"
if [ -x "$ENG" ]; then
    "$ENG" $ENG_ARGS --json > "$T/eng.plain" 2>&1
    "$ENG" $ENG_ARGS --json > "$T/eng.out" 2>&1 &
    EP=$!
    sleep 1
    "$PS" attach $EP -o "$T/eng.pst" --duration 1 2> "$T/eng.attach"; arc=$?
    wait $EP; erc=$?
    eng_same() { python3 - "$T/eng.plain" "$T/eng.out" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["requests"] == b["requests"] and a["stats"]["steps"] == b["stats"]["steps"]
PY
    }
    check engine_attached_output_unchanged sh -c "[ $arc -eq 0 ] && [ $erc -eq 0 ]" && check engine_output_same eng_same
    check engine_tensor_events_in_window sh -c "n=\$('$DUMP' '$T/eng.pst' | sed -n 's/^tensor_acquire=//p'); [ \"\${n:-0}\" -gt 0 ]"
    # its pools were made before the attach: each is named at its first
    # event in the window, and every tensor the engine acquired there came
    # from the buffer pool (--alloc pool: one pool acquire per tensor, just
    # before its tensor event; an edge of the window may fall between the
    # two, so the counts may differ by one: seen once in 25 windows, the
    # last event a pool acquire whose tensor event came after the stop)
    "$DUMP" "$T/eng.pst" > "$T/eng.dump"
    "$PS" report "$T/eng.pst" > "$T/eng.report" 2>&1
    dumpv() { sed -n "s/^$1=//p" "$T/eng.dump"; }
    check engine_pools_made_before_attach_named sh -c "[ '$(dumpv pool_create)' = 1 ] && [ '$(dumpv kvb_create)' = 1 ] &&
        grep -q 'refengine.transient' '$T/eng.report' && grep -q 'refengine.kv' '$T/eng.report'"
    check engine_pool_acquires_equal_tensor_acquires sh -c "d=\$(( $(dumpv pool_acquire) - $(dumpv tensor_acquire) )) &&
        [ \$d -ge -1 ] && [ \$d -le 1 ] && [ '$(dumpv pool_acquire)' -gt 0 ] && [ '$(dumpv kvb_alloc)' -gt 0 ]"
fi

# a server whose libc was replaced while it ran (an upgrade: its maps say
# "(deleted)"): attach reads the symbols of the file it mapped
LIBC=$(ldd "$P/att_maps" | sed -n 's/.*libc\.so\.6 => \([^ ]*\).*/\1/p')
if [ -f "$LIBC" ]; then
    mkdir -p "$T/oldlib" && cp "$LIBC" "$T/oldlib/libc.so.6"
    LD_LIBRARY_PATH="$T/oldlib" "$P/att_maps" "$T/dstop" > "$T/del.out" 2> "$T/del.err" &
    DP=$!
    wait_line "$T/del.err" '^ready' $DP
    rm "$T/oldlib/libc.so.6"
    grep -q 'oldlib/libc.so.6 (deleted)' /proc/$DP/maps; dl=$?
    "$PS" attach $DP -o "$T/del.pst" --stacks none --duration 0.5 2> "$T/del.attach"; arc=$?
    touch "$T/dstop"; wait $DP; drc=$?
    check attach_after_libc_replaced sh -c "[ $dl -eq 0 ] && [ $arc -eq 0 ] && [ $drc -eq 0 ]" ||
        sed 's/^/  /' "$T/del.attach"
fi

# mmap64 is recorded as mmap is: a window of tests/progs/att_maps holds as
# many mmap calls as munmap calls (its rounds pair them), each size half
"$P/att_maps" "$T/mstop" > "$T/maps.out" 2> "$T/maps.err" &
MP=$!
wait_line "$T/maps.err" '^ready' $MP
"$PS" attach $MP -o "$T/maps.pst" --stacks none --duration 1 2> "$T/maps.attach"; arc=$?
touch "$T/mstop"; wait $MP; mrc=$?
"$PS" report --json "$T/maps.pst" > "$T/maps.json" 2>/dev/null
check mmap64_recorded_in_a_window python3 - "$T/maps.json" $arc $mrc <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); c = d["calls"]
print("  window: mmap %d, munmap %d" % (c["mmap"], c["munmap"]))
assert sys.argv[2] == "0" and sys.argv[3] == "0", sys.argv
assert c["mmap"] >= 20 and abs(c["mmap"] - c["munmap"]) <= 2, c
PY

# an attach killed with -9 leaves its link; once `detach` has ended the
# window, the next attach is not refused for it, and leaves nothing behind
"$P/att_maps" "$T/kstop" > /dev/null 2> "$T/k.err" &
KP=$!
wait_line "$T/k.err" '^ready' $KP
"$PS" attach $KP -o "$T/k1.pst" --stacks none 2> "$T/k1.attach" &
AP=$!
wait_line "$T/k1.attach" 'recording to' $AP
kill -9 $AP; wait $AP 2>/dev/null
"$PS" detach $KP 2> "$T/k.detach"; drc=$?
"$PS" attach $KP -o "$T/k2.pst" --stacks none --duration 0.5 2> "$T/k2.attach"; arc=$?
touch "$T/kstop"; wait $KP
check attach_after_a_killed_attach sh -c "[ $drc -eq 0 ] && [ $arc -eq 0 ] && [ ! -e /dev/shm/poolscope-attach.$(id -u).$KP ]" ||
    sed 's/^/  /' "$T/k.detach" "$T/k2.attach"

# a folder the process cannot write in is said before gdb runs, by name
"$PS" attach $$ -o "$T/no/such/x.pst" 2> "$T/nodir.err"; rc=$?
check refuses_missing_output_folder sh -c "[ $rc -eq 2 ] && [ \$(wc -l < '$T/nodir.err') -eq 1 ] && grep -q '$T/no/such' '$T/nodir.err'"

# refusals, one line each
"$PS" attach 999999999 -o "$T/x.pst" 2> "$T/nopid.err"; rc=$?
check refuses_no_such_pid sh -c "[ $rc -eq 2 ] && [ \$(wc -l < '$T/nopid.err') -eq 1 ] && grep -q 'no such process' '$T/nopid.err' && [ ! -e '$T/x.pst' ]"
# a process whose main thread has exited (its other thread runs on): its
# maps read empty; said as such, not as a kernel thread
printf '#include <pthread.h>\n#include <unistd.h>\nstatic void *run(void *a) { sleep(5); return a; }\nint main(void) { pthread_t t; pthread_create(&t, 0, run, 0); pthread_exit(0); }\n' > "$T/zl.c"
if cc -pthread -o "$T/zl" "$T/zl.c" 2>/dev/null; then
    "$T/zl" & ZP=$!
    sleep 0.3
    "$PS" attach $ZP -o "$T/x.pst" 2> "$T/zl.err"; rc=$?
    kill $ZP 2>/dev/null; wait $ZP 2>/dev/null
    check refuses_exited_main_thread sh -c "[ $rc -eq 2 ] && [ \$(wc -l < '$T/zl.err') -eq 1 ] && grep -q 'main thread has exited' '$T/zl.err' && [ ! -e '$T/x.pst' ]"
fi
cc -static -O2 -o "$T/static" "$ROOT/tests/progs/att_server.c" -pthread 2>/dev/null
if [ -x "$T/static" ]; then
    "$T/static" 1 1 100000000 > /dev/null 2> "$T/static.err" &
    SSP=$!
    wait_line "$T/static.err" '^ready' $SSP
    "$PS" attach $SSP -o "$T/x.pst" 2> "$T/static.attach"; rc=$?
    kill $SSP; wait $SSP 2>/dev/null
    check refuses_static_binary sh -c "[ $rc -eq 2 ] && [ \$(wc -l < '$T/static.attach') -eq 1 ] && grep -q 'static binary' '$T/static.attach'"
fi
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null; then
    sleep 30 &
    SLP=$!
    chmod 755 "$T"
    setpriv --reuid=65534 --regid=65534 --clear-groups "$PS" attach $SLP -o "$T/y.pst" 2> "$T/user.err"; rc=$?
    kill $SLP; wait $SLP 2>/dev/null
    check refuses_other_users_process sh -c "[ $rc -eq 2 ] && [ \$(wc -l < '$T/user.err') -eq 1 ] && grep -q 'belongs to user 0' '$T/user.err'"    # and root, a process of another user: the tracer would run as that user
    # and could not write its counters file into our folder (a window that
    # could not be stopped)
    setpriv --reuid=65534 --regid=65534 --clear-groups sleep 30 &
    NP=$!
    sleep 0.2
    "$PS" attach $NP -o "$T/z.pst" 2> "$T/root.err"; rc=$?
    kill $NP; wait $NP 2>/dev/null
    check root_refuses_other_users_process sh -c "[ $rc -eq 2 ] && [ \$(wc -l < '$T/root.err') -eq 1 ] && grep -q 'belongs to user 65534' '$T/root.err' && [ ! -e '$T/z.pst' ]"
fi
"$PS" detach 999999999 2> "$T/det.err"; rc=$?
check detach_refuses_no_such_pid sh -c "[ $rc -eq 2 ] && grep -q 'no such process' '$T/det.err'"
"$PS" detach $$ 2> "$T/det2.err"; rc=$?
check detach_refuses_unattached sh -c "[ $rc -eq 2 ] && grep -q 'not attached' '$T/det2.err'"
exit $status
