# record_basic.sh — `poolscope record` on simple programs: exact call counts
# (one thread and eight), output and exit status as without the tracer, the
# refusals (static, setuid, existing -o, missing preload, an output
# directory that cannot take the trace) and usage errors; the closing
# summary from END chunks alone (POOLSCOPE_RECORD_STATS says what was read)
# and its note on a child that dropped the tracer.
. tests/integration/lib.sh
ROOT=$PWD
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
PS=$B/bin/poolscope P=$B/tests/progs DUMP=$B/tests/progs/pstdump

# every line of $1 appears in $2
same_keys() {
    while IFS= read -r l; do
        grep -qxF "$l" "$2" || { echo "  want $l, got: $(grep "^${l%%=*}=" "$2")" >&2; return 1; }
    done <"$1"
}
key() { sed -n "s/^$2=//p" "$1" | head -1; }
# exit code of a command, as a value
rc_of() { "$@" >/dev/null 2>&1; echo $?; }
# $1 = expected code, rest = command; stderr must be one line
usage_error() {
    want=$1; shift
    "$@" >"$T/u.out" 2>"$T/u.err"; got=$?
    [ "$got" -eq "$want" ] && [ "$(wc -l <"$T/u.err")" -eq 1 ] ||
        { echo "  exit $got, stderr: $(cat "$T/u.err")" >&2; return 1; }
}

# ---- front end ----
all_listed() {
    "$PS" --help >"$T/help" || return 1
    for c in record report replay gate sql plot export diff; do
        grep -q "^  $c " "$T/help" || { echo "  $c not listed" >&2; return 1; }
    done
}
check help_lists_commands all_listed
check help_record sh -c "'$PS' help record | grep -q -- '--follow-exec'"
check version sh -c "'$PS' --version | grep -q '^poolscope [0-9]'"
# a command still announced as coming answers "not implemented yet", exit 2
not_implemented() {
    c=$("$PS" --help | sed -n 's/^  \([a-z]*\) .*(coming)$/\1/p' | head -1)
    [ -z "$c" ] && return 0   # every command is in by now
    usage_error 2 "$PS" "$c" x.pst && grep -q 'not implemented yet' "$T/u.err"
}
check not_implemented_exit_2 not_implemented
check unknown_command_exit_2 usage_error 2 "$PS" frobnicate
check no_args_exit_2 sh -c "'$PS' >/dev/null 2>&1; [ \$? -eq 2 ]"
check record_no_cmd_exit_2 usage_error 2 "$PS" record
check record_bad_stacks_exit_2 usage_error 2 "$PS" record --stacks frame -- true
check record_bad_depth_exit_2 usage_error 2 "$PS" record --depth 0 -- true
check record_bad_depth2_exit_2 usage_error 2 "$PS" record --depth 12x -- true
check record_bad_signal_exit_2 usage_error 2 "$PS" record --signal NOPE -- true
check record_unknown_flag_exit_2 usage_error 2 "$PS" record --frob -- true
check record_missing_value_exit_2 usage_error 2 "$PS" record -o
check record_not_found_127 usage_error 127 "$PS" record -o "$T/nf.pst" -- no-such-command-here

# ---- exact counts ----
counts() { # $1 name, rest: args of alloc_counts
    n=$1; shift
    "$PS" record -o "$T/$n.pst" -- "$P/alloc_counts" -d "$T" "$@" >"$T/$n.out" 2>"$T/$n.err" &&
        "$DUMP" --scope counted "$T/$n.pst" >"$T/$n.dump" && same_keys "$T/$n.out" "$T/$n.dump" &&
        [ "$(key "$T/$n.dump" complete)" = 1 ] && [ "$(key "$T/$n.dump" lost)" = 0 ]
}
check exact_counts_one_thread counts c1 -n 500
check exact_counts_8_threads counts c8 -n 300 -t 8
check summary_names_trace sh -c "grep -q 'c1.pst: [0-9]* events' '$T/c1.err'"

# ---- output and status as without the tracer ----
same_output() {
    "$P/alloc_counts" -n 200 -t 8 -d "$T" >"$T/plain.out" 2>&1
    "$PS" record -o "$T/same.pst" -- "$P/alloc_counts" -n 200 -t 8 -d "$T" >"$T/traced.out" 2>"$T/traced.err"
    cmp -s "$T/plain.out" "$T/traced.out"
}
check output_identical same_output
check exit_status_7 sh -c "[ \$(cd '$T' && '$PS' record -o st7.pst -- sh -c 'exit 7' >/dev/null 2>&1; echo \$?) -eq 7 ]"
check exit_status_0 sh -c "[ \$(cd '$T' && '$PS' record -o st0.pst -- true >/dev/null 2>&1; echo \$?) -eq 0 ]"
check killed_by_signal_128_plus sh -c "[ \$(cd '$T' && '$PS' record -o st15.pst -- sh -c 'kill -TERM \$\$' >/dev/null 2>&1; echo \$?) -eq 143 ]"

default_name() {
    mkdir -p "$T/dflt" && cd "$T/dflt" || return 1
    "$PS" record -- "$P/alloc_counts" -n 1 -d "$T" >/dev/null 2>"$T/dflt.err"
    rc=$?
    cd "$ROOT" || return 1
    f=$(ls "$T/dflt" | grep '^poolscope\.[0-9]*\.pst$')
    [ $rc -eq 0 ] && [ -n "$f" ] && "$DUMP" "$T/dflt/$f" >"$T/dflt.dump" &&
        [ "$(key "$T/dflt.dump" pid)" = "$(echo "$f" | cut -d. -f2)" ]
}
check default_output_name_has_pid default_name

forward_term() {
    "$PS" record -o "$T/fwd.pst" -- sleep 30 >/dev/null 2>&1 &
    rp=$!
    sleep 0.5
    kill -TERM $rp
    wait $rp
    [ $? -eq 143 ]
}
check sigterm_forwarded_to_child forward_term

# ---- stacks: churn allocates 14 frames below main (12 at_depth + layer) ----
stacks() { # NAME MODE DEPTH EXE MIN MAX
    "$PS" record -o "$T/$1.pst" --stacks "$2" --depth "$3" -- "$4" 2200 >/dev/null 2>&1 || return 1
    "$DUMP" "$T/$1.pst" >"$T/$1.dump" || return 1
    d=$(key "$T/$1.dump" max_stack_depth)
    [ "$(key "$T/$1.dump" stack_events)" -ge "$(key "$T/$1.dump" malloc)" ] && [ "$d" -ge "$5" ] && [ "$d" -le "$6" ] ||
        { echo "  $1: max depth $d, $(key "$T/$1.dump" stack_events) stacks for $(key "$T/$1.dump" malloc) mallocs" >&2; return 1; }
}
check stacks_fp stacks sfp fp 64 "$P/churn" 15 64
check stacks_depth_limit stacks sdepth fp 5 "$P/churn" 5 5
nofp_dwarf() {
    cc -std=c11 -O2 -g -fomit-frame-pointer -o "$T/churn-nofp" "$ROOT/tests/progs/churn.c" &&
        stacks sdwarf dwarf 64 "$T/churn-nofp" 15 64
}
check stacks_dwarf_without_frame_pointers nofp_dwarf

# The interposer's hand-coded encoders write exactly what the format's
# table-driven encoder writes, for two million random events.
check preload_encoders_match_format "$P/pre_encode"

# ---- selective tracing ----
# Paused from the start: no allocation is recorded; frees are (so that
# memory allocated while recording and freed while paused is no leak), and
# each is a free of an address never allocated under the tracer.
paused() {
    "$PS" record -o "$T/paused.pst" --paused -- "$P/alloc_counts" -n 50 -d "$T" >/dev/null 2>&1 || return 1
    "$DUMP" "$T/paused.pst" >"$T/paused.dump" && [ "$(key "$T/paused.dump" malloc)" = 0 ] &&
        [ "$(key "$T/paused.dump" calloc)" = 0 ] && [ "$(key "$T/paused.dump" realloc)" = 0 ] || return 1
    "$PS" report "$T/paused.pst" --json >"$T/paused.json" || return 1
    fr=$(key "$T/paused.dump" free)
    uf=$(sed -n 's/^  "unknown_frees": \([0-9]*\).*/\1/p' "$T/paused.json")
    lo=$(sed -n 's/^  "leaked_objects": \([0-9]*\).*/\1/p' "$T/paused.json")
    [ "$uf" = "$fr" ] && [ "$lo" = 0 ] || { echo "  frees $fr, unknown frees $uf, leaked objects $lo" >&2; return 1; }
}
check paused_records_no_allocations paused
# Allocated while recording, freed while paused: not a leak.
pause_free() {
    "$PS" record -o "$T/pf.pst" -- "$P/pause_free" 500 >"$T/pf.out" 2>/dev/null || return 1
    "$PS" report "$T/pf.pst" --json >"$T/pf.json" || return 1
    lo=$(sed -n 's/^  "leaked_objects": \([0-9]*\).*/\1/p' "$T/pf.json")
    uf=$(sed -n 's/^  "unknown_frees": \([0-9]*\).*/\1/p' "$T/pf.json")
    # the program's own count: 500 paused pairs (frees of untraced blocks)
    [ "$lo" = 0 ] && [ "$uf" = "$(sed -n 's/.*paused_pairs=\([0-9]*\).*/\1/p' "$T/pf.out")" ] ||
        { echo "  leaked objects $lo, unknown frees $uf; program: $(cat "$T/pf.out")" >&2; return 1; }
}
check freed_while_paused_is_no_leak pause_free
# A program that ends before the tracer's first flush round still gets the
# format-1.2 SYNC fields (written by the final flush): the resolution line,
# and the tracer's own thread left out of the thread count.
short_run() {
    for i in 1 2 3; do
        rm -f "$T/short.pst"
        "$PS" record -o "$T/short.pst" -- /bin/true 2>/dev/null || return 1
        "$PS" report "$T/short.pst" --json >"$T/short.json" || return 1
        res=$(sed -n 's/^  "time_resolution_ns": \([0-9]*\).*/\1/p' "$T/short.json")
        th=$(sed -n 's/^  "threads": \([0-9]*\).*/\1/p' "$T/short.json")
        [ "${res:-0}" -gt 0 ] && [ "$th" = 1 ] || { echo "  run $i: resolution ${res:-none}, threads $th" >&2; return 1; }
    done
}
check short_run_reports_resolution_and_one_thread short_run
# dash sends itself the toggle signal, then forks a child: recording resumed
signal_toggle() {
    "$PS" record -o "$T/sig.pst" --paused --signal USR2 -- \
        sh -c "kill -USR2 \$\$; '$P/alloc_counts' -n 5 -d '$T' >/dev/null" 2>/dev/null || return 1
    "$DUMP" "$T/sig.pst" >"$T/sig.dump" || return 1
    [ "$(key "$T/sig.dump" fork)" = 1 ] && [ "$(key "$T/sig.dump" trace_on)" = 1 ] ||
        { echo "  want a fork and a trace_on event after the signal:" >&2; sed -n '/alloc_calls/,$p' "$T/sig.dump" >&2; return 1; }
}
check signal_resumes_recording signal_toggle

# ---- refusals ----
static_refused() {
    printf 'int main(void){return 0;}\n' >"$T/st.c"
    cc -static -o "$T/static-prog" "$T/st.c" 2>/dev/null || { echo "  no static libc: skipped" >&2; return 0; }
    "$PS" record -o "$T/static.pst" -- "$T/static-prog" 2>"$T/static.err"
    [ $? -eq 2 ] && grep -q "static-prog.*statically linked" "$T/static.err" && [ ! -e "$T/static.pst" ]
}
check static_refused static_refused
setuid_refused() {
    cp "$P/alloc_counts" "$T/suid-prog" && chmod u+s "$T/suid-prog"
    "$PS" record -o "$T/suid.pst" -- "$T/suid-prog" 2>"$T/suid.err"
    [ $? -eq 2 ] && grep -q "suid-prog.*setuid" "$T/suid.err" && [ ! -e "$T/suid.pst" ] || return 1
    cp "$P/alloc_counts" "$T/sgid-prog" && chmod g+s "$T/sgid-prog"
    "$PS" record -o "$T/sgid.pst" -- "$T/sgid-prog" 2>"$T/sgid.err"
    [ $? -eq 2 ] && grep -q "sgid-prog.*setgid" "$T/sgid.err"
}
check setuid_setgid_refused setuid_refused
existing_refused() {
    echo keep >"$T/exists.pst"
    "$PS" record -o "$T/exists.pst" -- true 2>"$T/ex.err"
    [ $? -eq 2 ] && grep -q "exists" "$T/ex.err" && [ "$(cat "$T/exists.pst")" = keep ]
}
check existing_output_refused existing_refused
no_preload() {
    mkdir -p "$T/lonely/bin" && cp "$PS" "$T/lonely/bin/poolscope"
    env -u POOLSCOPE_PRELOAD_LIB "$T/lonely/bin/poolscope" record -o "$T/np.pst" -- true 2>"$T/np.err"
    [ $? -eq 2 ] && grep -q "preload library not found" "$T/np.err"
}
check missing_preload_refused no_preload
installed_layout() {
    mkdir -p "$T/inst/bin" "$T/inst/lib/poolscope" && cp "$PS" "$T/inst/bin/poolscope" &&
        cp "$PRELOAD" "$T/inst/lib/poolscope/" &&
        "$T/inst/bin/poolscope" record -o "$T/inst.pst" -- "$P/alloc_counts" -n 1 -d "$T" >/dev/null 2>&1 &&
        [ -s "$T/inst.pst" ]
}
check installed_layout_found installed_layout

# ---- the output directory, checked before the program runs ----
outdir_refused() { # NAME DIR-IN-MESSAGE RECORD-ARGS... (the program would touch $T/NAME.ran)
    n=$1 d=$2; shift 2
    "$@" -- touch "$T/$n.ran" >/dev/null 2>"$T/$n.err"; rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$T/$n.err")" -eq 1 ] && grep -qF "cannot write in $d" "$T/$n.err" &&
        [ ! -e "$T/$n.ran" ] || { echo "  $n: exit $rc, ran: $(ls "$T/$n.ran" 2>&1), stderr: $(cat "$T/$n.err")" >&2; return 1; }
}
check output_dir_missing_refused outdir_refused nodir "$T/no-such-dir" "$PS" record -o "$T/no-such-dir/x.pst"
check output_dir_proc_refused outdir_refused procdir /proc "$PS" record -o /proc/x.pst
check output_cwd_unwritable_refused outdir_refused proccwd "the current directory /proc" sh -c "cd /proc && exec '$PS' record \"\$@\"" sh

# ---- the summary comes from the END chunk alone ----
# ~10 M events; nothing of them is read again after the program exits.
# exitgap prints the time from the program's last line (churn writes it
# just before exit, so the tracer's final flush is inside) to record's exit;
# printed, not asserted.
from_end() {
    rm -f "$T/big.stats"
    POOLSCOPE_RECORD_STATS=$T/big.stats "$P/exitgap" "$PS" record -o "$T/big.pst" -- "$P/churn" 10000000 \
        >"$T/big.out" 2>"$T/big.err"
    echo $? >"$T/big.rc"
    [ "$(cat "$T/big.rc")" = 0 ] || { cat "$T/big.err" >&2; return 1; }
    ev=$(sed -n 's/.*big.pst: \([0-9]*\) events.*/\1/p' "$T/big.err")
    echo "  note: record, program exit to record exit: $(key "$T/big.out" exit_gap_ms) ms for ${ev:-?} events" >&2
    [ "$(cat "$T/big.stats")" = "scanned_bytes=0" ] && [ "${ev:-0}" -ge 9000000 ] ||
        { echo "  stats: $(cat "$T/big.stats"), summary: $(cat "$T/big.err")" >&2; return 1; }
    # the END chunk's count is the reader's
    "$DUMP" "$T/big.pst" >"$T/big.dump" && [ "$(key "$T/big.dump" events)" = "$ev" ] ||
        { echo "  pstdump events=$(key "$T/big.dump" events), summary $ev" >&2; return 1; }
}
check summary_from_end_chunk_reads_no_events from_end
no_end_scanned() {
    rm -f "$T/kill.stats"
    POOLSCOPE_RECORD_STATS=$T/kill.stats "$PS" record -o "$T/kill.pst" -- "$P/sigkill" 20000 \
        >"$T/kill.out" 2>"$T/kill.err" &
    rp=$!
    i=0
    while ! grep -q '^sync' "$T/kill.out" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 200 ] && { kill $rp; echo "  no sync line" >&2; return 1; }
        sleep 0.05
    done
    sleep 0.4   # past a flush of the tracer
    child=$(pgrep -P $rp)
    # without its counters file (ctl.h) a killed trace cannot be finished:
    # record has only the trace itself to read
    rm -f /dev/shm/poolscope.*/"$(stat -c %d.%i "$T/kill.pst").ctl"
    [ -n "$child" ] && kill -KILL "$child"
    wait $rp
    n=$(sed -n 's/^scanned_bytes=//p' "$T/kill.stats")
    [ "${n:-0}" -gt 0 ] && grep -q 'kill.pst: [0-9]* events.*truncated' "$T/kill.err" ||
        { echo "  stats: $(cat "$T/kill.stats" 2>&1), summary: $(cat "$T/kill.err")" >&2; return 1; }
}
check trace_without_end_is_read no_end_scanned

# ---- a child that dropped LD_PRELOAD is noted ----
dropped() { # MODE WANT-NOTE(1|0)
    "$PS" record -o "$T/drop-$1.pst" -- "$P/dropenv" "$1" >/dev/null 2>"$T/drop-$1.err" || return 1
    if [ "$2" = 1 ]; then
        grep -q "^poolscope: pid [0-9]*: child exec'd /.*/true without the tracer (its environment dropped LD_PRELOAD)$" \
            "$T/drop-$1.err"
    else
        ! grep -q "without the tracer" "$T/drop-$1.err"
    fi || { cat "$T/drop-$1.err" >&2; return 1; }
}
check dropped_preload_noted_env_u dropped system 1
check dropped_preload_noted_clean_execve dropped exec 1
check kept_preload_not_noted dropped keep 0
exit $status
