# record_robust.sh — the tracer under a hostile program: one that closes
# every descriptor and reuses the numbers, one killed with SIGKILL, one that
# starts and stops threads in a loop, and the hazards of pre_hazards.c
# (each run under a time limit: a hang fails the check, never the suite).
. tests/integration/lib.sh

closefds() {
    d=$T/cf; mkdir -p "$d"
    "$PS" record -o "$T/cf.pst" -- "$P/closefds" "$d" 2>"$T/cf.err" ||
        { echo "  closefds failed: $(cat "$T/cf.err")" >&2; return 1; }
    "$DUMP" "$T/cf.pst" >"$T/cf.dump" || return 1
    [ "$(key "$T/cf.dump" complete)" = 1 ] && [ "$(key "$T/cf.dump" corrupt)" = 0 ] &&
        [ "$(key "$T/cf.dump" malloc)" -ge 100000 ] ||
        { echo "  trace not valid/complete:" >&2; cat "$T/cf.dump" >&2; return 1; }
    for i in 0 1 2 3; do
        f=$d/own.$i
        [ "$(wc -l <"$f")" -eq 2000 ] || { echo "  $f: $(wc -l <"$f") lines" >&2; return 1; }
        # only our own lines: no trace bytes
        if LC_ALL=C grep -av '^closefds line [0-9]*$' "$f" | grep -q .; then
            echo "  $f holds foreign bytes" >&2; return 1
        fi
        LC_ALL=C grep -aq PSTRACE "$f" && return 1
        [ "$(wc -c <"$f")" -eq "$(seq 0 1999 | sed 's/^/closefds line /' | wc -c)" ] || return 1
    done
}
check closefds_trace_valid_files_clean closefds

sigkill() {
    "$PS" record -o "$T/k.pst" -- "$P/sigkill" 30000 >"$T/k.out" 2>"$T/k.err" &
    rp=$!
    wait_line "$T/k.out" '^sync' $rp || return 1
    sleep 0.4
    # the traced program is record's only child
    child=$(pgrep -P $rp)
    [ -n "$child" ] || { echo "  no child" >&2; return 1; }
    kill -KILL "$child"
    wait $rp; rc=$?
    [ $rc -eq 137 ] || { echo "  record exit $rc" >&2; return 1; }
    # record finished the trace from the image's counters file: END, with
    # the exact number of events the rings held (ctl.h)
    grep -q 'k.pst: [0-9]* events.*killed' "$T/k.err" || { cat "$T/k.err" >&2; return 1; }
    "$DUMP" "$T/k.pst" >"$T/k.dump" || return 1
    n=$(awk '{print $2}' "$T/k.out"); fr=$(awk '{print $3}' "$T/k.out")
    [ "$(key "$T/k.dump" truncated)" = 0 ] && [ "$(key "$T/k.dump" end_seen)" = 1 ] &&
        [ "$(key "$T/k.dump" mark.sync)" = 1 ] &&
        [ "$(key "$T/k.dump" malloc)" -ge "$n" ] && [ "$(key "$T/k.dump" free)" -ge "$fr" ] ||
        { echo "  want >= $n mallocs, $fr frees, the sync mark, END:" >&2; cat "$T/k.dump" >&2; return 1; }
    ! ls /dev/shm/poolscope.*/"$(stat -c %d.%i "$T/k.pst").ctl" >/dev/null 2>&1 ||
        { echo "  counters file left behind" >&2; return 1; }
}
check sigkill_keeps_events_before_sync sigkill

threads() {
    "$P/threads" 40 4 250 >"$T/th.plain" || return 1
    "$PS" record -o "$T/th.pst" -- "$P/threads" 40 4 250 >"$T/th.out" 2>"$T/th.err" || return 1
    cmp -s "$T/th.plain" "$T/th.out" || return 1
    "$DUMP" "$T/th.pst" >"$T/th.dump" || return 1
    m=$(sed 's/.*mallocs=//' "$T/th.out")
    [ "$(key "$T/th.dump" complete)" = 1 ] && [ "$(key "$T/th.dump" lost)" = 0 ] &&
        [ "$(key "$T/th.dump" malloc)" -ge "$m" ] && [ "$(key "$T/th.dump" free)" -ge "$m" ] &&
        [ "$(key "$T/th.dump" streams)" -ge 161 ] && [ "$(key "$T/th.dump" thread_name)" -eq 160 ] ||
        { cat "$T/th.dump" >&2; return 1; }
}
check threads_start_stop_all_streams threads
# ---- hazards a review found (tests/progs/pre_hazards.c) ----
hz() {   # hz NAME ARGS...: record pre_hazards under a 60 s limit
    hzn=$1; shift
    timeout 60 "$PS" record -o "$T/hz-$hzn.pst" -- "$P/pre_hazards" "$@" >"$T/hz-$hzn.out" 2>"$T/hz-$hzn.err"
}
bigids() {
    hz bigids bigids || { cat "$T/hz-bigids.out" "$T/hz-bigids.err" >&2; return 1; }
    "$DUMP" "$T/hz-bigids.pst" >"$T/hz-bigids.dump" || return 1
    # 4 threads x 50 events of 4096 ids, split into records of 256 ids
    [ "$(key "$T/hz-bigids.dump" kvb_free)" -eq $((4 * 50 * 16)) ] && [ "$(key "$T/hz-bigids.dump" complete)" = 1 ] ||
        { cat "$T/hz-bigids.dump" >&2; return 1; }
}
check api_long_id_lists_split_not_overflowing bigids
xfork() {
    hz xfork xfork 40 || { cat "$T/hz-xfork.out" "$T/hz-xfork.err" >&2; return 1; }
    "$DUMP" "$T/hz-xfork.pst" >"$T/hz-xfork.dump" || return 1
    [ "$(key "$T/hz-xfork.dump" complete)" = 1 ] && [ "$(key "$T/hz-xfork.dump" fork)" -eq 40 ] &&
        [ "$(ls "$T"/hz-xfork.*.pst | wc -l)" -eq 40 ] || { cat "$T/hz-xfork.dump" >&2; return 1; }
}
check _Fork_children_get_their_own_trace xfork
errno_kept() {
    hz errno errno && grep -q 'changed 0 times' "$T/hz-errno.out" ||
        { cat "$T/hz-errno.out" "$T/hz-errno.err" >&2; return 1; }
}
check errno_kept_while_trace_unwritable errno_kept
fsize() {
    # SIGXFSZ would kill it (exit 153) if the tracer wrote past the limit
    hz fsize fsize && grep -q 'changed 0 times' "$T/hz-fsize.out" ||
        { cat "$T/hz-fsize.out" "$T/hz-fsize.err" >&2; return 1; }
    [ "$(wc -c <"$T/hz-fsize.pst")" -le 1048576 ] || return 1
    "$DUMP" "$T/hz-fsize.pst" >"$T/hz-fsize.dump"
    [ "$(key "$T/hz-fsize.dump" lost)" -gt 0 ] || { echo "  nothing counted as lost" >&2; return 1; }
}
check rlimit_fsize_respected_and_loss_counted fsize
execfail() {
    hz execfail execfail && grep -q 'ok' "$T/hz-execfail.out" ||
        { cat "$T/hz-execfail.out" "$T/hz-execfail.err" >&2; return 1; }
    "$DUMP" "$T/hz-execfail.pst" >"$T/hz-execfail.dump" || return 1
    # every malloc the threads made is recorded or counted lost (reason exec)
    [ $(( $(key "$T/hz-execfail.dump" malloc) + $(key "$T/hz-execfail.dump" lost) )) -ge 2000 ] &&
        [ "$(key "$T/hz-execfail.dump" fork)" -eq 1 ] ||
        { cat "$T/hz-execfail.dump" >&2; return 1; }
}
check failed_execs_in_two_threads_keep_tracing execfail
exit $status
