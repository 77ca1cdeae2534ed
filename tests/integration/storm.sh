# storm.sh — threads x fork x exec x signals x dlopen under the tracer
# (issue 25): no child killed, every image's trace complete, and each
# image's marked allocations (tests/progs/storm.c) exactly the program's own
# count; signal handlers that allocate while their thread is in mmap/munmap
# recorded, and the rare ones nested in a hook counted lost, never dropped
# silently.
. tests/integration/lib.sh

images_exact() { # DIR WANT_PARENT WANT_CHILD: the first trace has WANT_PARENT, every other WANT_CHILD
    first=1
    for f in $(sed -n 's/^poolscope: pid [0-9]*: \(.*\): [0-9]* events.*/\1/p' "$1/err"); do
        "$DUMP" --size 4242 "$f" >"$f.dump" || return 1
        want=$3; [ "$f" = "$1/t.pst" ] && want=$2
        [ "$(key "$f.dump" complete)" = 1 ] && [ "$(key "$f.dump" lost)" = 0 ] &&
            [ "$(key "$f.dump" sized_malloc)" = "$want" ] ||
            { echo "  $f: want $want marked, complete, 0 lost:" >&2; grep -E '^(sized|lost|complete)' "$f.dump" >&2; return 1; }
    done
}

fork_storm() { # RUN: 16 threads x 8 children, 20 pairs each, beside 64 idle threads
    d=$T/fork$1; mkdir -p "$d"
    STORM_IDLE=64 "$PS" record --stacks fp -o "$d/t.pst" -- "$P/storm" fork 16 8 20 >"$d/out" 2>"$d/err" ||
        { echo "  record: $(cat "$d/out" "$d/err" | head -5)" >&2; return 1; }
    [ "$(key "$d/out" killed)" = 0 ] && [ "$(key "$d/out" children)" = 128 ] || return 1
    [ "$(grep -c 'events' "$d/err")" -eq 129 ] || { echo "  want 129 traces" >&2; return 1; }
    images_exact "$d" "$(key "$d/out" parent_marked)" 20
}
for r in 1 2 3 4; do check "fork_storm_$r" fork_storm $r; done

exec_storm() {
    d=$T/exec; mkdir -p "$d"
    "$PS" record -o "$d/t.pst" -- "$P/storm" exec 4 4 30 >"$d/out" 2>"$d/err" || return 1
    [ "$(key "$d/out" killed)" = 0 ] && [ "$(grep -c 'events' "$d/err")" -ge 17 ] || return 1
    # forked children exec at once: their pre-exec image has no marked calls,
    # the exec'd leaf has 30
    for f in $(sed -n 's/^poolscope: pid [0-9]*: \(.*\): [0-9]* events.*/\1/p' "$d/err"); do
        "$DUMP" --size 4242 "$f" >"$f.dump" || return 1
        [ "$(key "$f.dump" complete)" = 1 ] && [ "$(key "$f.dump" lost)" = 0 ] || return 1
    done
    leaves=$(grep -l '^sized_malloc=30$' "$d"/*.dump | wc -l)
    [ "$leaves" -eq 16 ] || { echo "  want 16 leaves with 30 marked, got $leaves" >&2; return 1; }
}
check exec_storm exec_storm

signal_storm() {
    d=$T/sig; mkdir -p "$d"
    "$PS" record --stacks none -o "$d/t.pst" -- "$P/storm" signal 20000 20 >"$d/out" 2>"$d/err" || return 1
    "$DUMP" --size 4243 "$d/t.pst" >"$d/dump" || return 1
    made=$(key "$d/out" handler_marked); got=$(key "$d/dump" sized_malloc); lost=$(key "$d/dump" lost)
    # a handler nested in a hook loses its malloc and its free: lost is even
    [ $((lost % 2)) -eq 0 ] && [ $((got + lost / 2)) -eq "$made" ] && [ $((got * 100)) -ge $((made * 95)) ] ||
        { echo "  handler made $made, trace has $got, lost $lost" >&2; return 1; }
}
check signal_handler_allocations_counted signal_storm

dlopen_storm() {
    d=$T/dl; mkdir -p "$d"
    "$PS" record -o "$d/t.pst" -- "$P/storm" dlopen 4 200 >"$d/out" 2>"$d/err" || return 1
    "$DUMP" --size 4242 "$d/t.pst" >"$d/dump" || return 1
    [ "$(key "$d/dump" complete)" = 1 ] && [ "$(key "$d/dump" lost)" = 0 ] &&
        [ "$(key "$d/dump" sized_malloc)" = "$(key "$d/out" parent_marked)" ]
}
check dlopen_storm dlopen_storm
exit $status
