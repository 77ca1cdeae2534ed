# thread_stacks.sh — thread stacks as mappings of their threads (issue 27,
# item 9; FORMAT.md, "Thread stacks"). tests/progs/thread_stacks starts 7
# threads with stack sizes of 256 KiB to 1792 KiB, alive together at a
# barrier, and writes down what pthread_getattr_np says of each stack and
# what /proc/self/maps holds over each (guard and stack) at that barrier.
# Under `poolscope record` (dwarf stacks, the default, and none):
#   - report --json's peak_mmap_committed_bytes is the stacks' summed size,
#     peak_mmap_reserved_bytes their summed guards, peak_mmap_anon_bytes
#     both, and those equal the /proc/self/maps figures; after the joins
#     the program maps half of each sum itself, so a stack left live at its
#     thread's end would make the peaks 1.5 times;
#   - calls counts the program's own mmap/munmap calls only (3 each);
#   - each stack is an MMAP (read-write, the thread-stack flag) named
#     "[stack]" by the next event of its stream, its guard an MMAP
#     PROT_NONE, both unmapped in the same stream before its THREAD_END
#     (thread 5 ends with pthread_exit; a detached thread too);
#   - a stack the program gave (pthread_attr_setstack) is its own mmap
#     only, with no thread-stack event;
#   - the program's output and exit status are those of a plain run.
# Before the change the peaks were the program's own half mappings (and
# with stacks on, the threads' pthread_getattr_np deadlocked the tracer).
. tests/integration/lib.sh
PRE=$B/tests/progs/pre_dump
FLAG=4294967296   # 1 << 32: the thread-stack bit of an MMAP's flags

plain() {
    "$P/thread_stacks" "$T/plain.facts" >"$T/plain.out" 2>&1
    echo $? >"$T/plain.rc"
}
run() {
    n=$1; shift
    timeout 60 "$PS" record -o "$T/$n.pst" "$@" -- "$P/thread_stacks" "$T/$n.facts" >"$T/$n.out" 2>"$T/$n.err"
    echo $? >"$T/$n.rc"
    "$PRE" -v "$T/$n.pst" >"$T/$n.ev" 2>/dev/null
    "$PS" report --json "$T/$n.pst" >"$T/$n.json" 2>"$T/$n.rerr"
}
plain
run dw
run none --stacks none

jkey() { sed -n "s/^ *\"$2\": \([0-9]*\),*$/\1/p" "$T/$1.json" | head -1; }
ckey() { awk -v k="\"$2\":" '/"calls": \{/ { c = 1; next } c && /\}/ { exit } c && $1 == k { gsub(/,/, "", $2); print $2 }' "$T/$1.json"; }

same_output() {
    [ "$(cat "$T/plain.rc")" = 0 ] && [ "$(cat "$T/$1.rc")" = 0 ] && cmp -s "$T/plain.out" "$T/$1.out" ||
        { echo "  rc $(cat "$T/$1.rc"), output differs:" >&2; diff "$T/plain.out" "$T/$1.out" >&2; cat "$T/$1.err" >&2; return 1; }
}

# the program's own figures: getattr sums equal /proc/self/maps
facts_agree() {
    f=$T/$1.facts
    [ "$(key "$f" sum_size)" = "$(key "$f" maps_committed)" ] && [ "$(key "$f" sum_guard)" = "$(key "$f" maps_reserved)" ] &&
        [ "$(key "$f" sum_size)" -gt 0 ] ||
        { echo "  getattr vs /proc/self/maps:" >&2; grep -E 'sum_|maps_' "$f" >&2; return 1; }
}

peaks() {
    f=$T/$1.facts
    c=$(key "$f" maps_committed) r=$(key "$f" maps_reserved)
    gc=$(jkey "$1" peak_mmap_committed_bytes) gr=$(jkey "$1" peak_mmap_reserved_bytes) ga=$(jkey "$1" peak_mmap_anon_bytes)
    [ "$gc" = "$c" ] && [ "$gr" = "$r" ] && [ "$ga" = $((c + r)) ] ||
        { echo "  peaks committed/reserved/anon $gc/$gr/$ga, want $c/$r/$((c + r))" >&2; return 1; }
}

calls_are_the_programs() {
    [ "$(ckey "$1" mmap)" = 3 ] && [ "$(ckey "$1" munmap)" = 3 ] ||
        { echo "  calls mmap $(ckey "$1" mmap) munmap $(ckey "$1" munmap), want 3 3" >&2; return 1; }
}

# stack_events NAME ADDR SIZE GUARD: in every stream that maps the stack
# (glibc's cache may hand one stack to a later thread: another stream),
# its MMAP, its name as the next event, the guard's MMAP, and one MUNMAP
# of each before the stream's thread_end
stack_events() {
    [ -n "$2" ] && [ -n "$3" ] && [ -n "$4" ] || { echo "  no facts" >&2; return 1; }
    g=$(printf '0x%x' $(($2 - $4)))
    awk -v a="$2" -v sz="$3" -v g="$g" -v gs="$4" -v F="$FLAG" '
    function flagged(x) { return int(x / F) % 2 == 1 }
    $5 == "mmap" && $6 == a && $7 == sz && $8 == 3 && flagged($9) { m[$1]++; q[$1] = $3 }
    $5 == "mmap" && $6 == g && $7 == gs && $8 == 0 && flagged($9) { gm[$1]++ }
    $5 == "mmap" && ($6 == a || $6 == g) && !flagged($9) { own++ }
    $5 == "mmap_name" && $6 == a && $7 == "\"[stack]\"" { nq[$1] = $3 }
    $5 == "munmap" && $6 == a && $7 == sz { u[$1]++; uq[$1] = $3 }
    $5 == "munmap" && $6 == g && $7 == gs { gu[$1]++ }
    $5 == "thread_end" { end[$1] = $3 }
    END {
        for (s in m) {
            n++
            if (m[s] != 1 || gm[s] != 1 || u[s] != 1 || gu[s] != 1) {
                print "  stream " s ": mmap " m[s] " guard " gm[s] + 0 " munmap " u[s] + 0 " guard " gu[s] + 0; exit 1 }
            if (nq[s] != q[s] + 1) { print "  stream " s ": no [stack] name right after the mmap"; exit 1 }
            if (!(s in end) || end[s] < uq[s]) { print "  stream " s ": munmap not before thread_end"; exit 1 }
        }
        for (s in gm) if (!(s in m)) { print "  a guard without its stack"; exit 1 }
        if (!n || own) { print "  " n + 0 " streams map it, " own + 0 " own calls"; exit 1 }
    }' "$T/$1.ev" >&2
}

all_stacks() {
    f=$T/$1.facts
    for i in 0 1 2 3 4 5 6; do
        stack_events "$1" "$(key "$f" t${i}_addr)" "$(key "$f" t${i}_size)" "$(key "$f" t${i}_guard)" ||
            { echo "  thread $i" >&2; return 1; }
    done
    stack_events "$1" "$(key "$f" detached_addr)" "$(key "$f" detached_size)" "$(key "$f" detached_guard)" ||
        { echo "  the detached thread" >&2; return 1; }
}

# the program's own stack: its mmap (no flag), no thread-stack event over it
user_stack_not_a_thread_stack() {
    f=$T/$1.facts
    awk -v a="$(key "$f" user_stack)" -v l="$(key "$f" user_len)" -v F="$FLAG" '
    $5 == "mmap" && $6 == a { if (int($9 / F) % 2 == 0 && $7 == l) own++; else bad++ }
    $5 == "mmap_name" && $6 == a { bad++ }
    END { exit !(own == 1 && !bad) }' "$T/$1.ev" ||
        { echo "  events at the user stack:" >&2; grep " $(key "$f" user_stack) " "$T/$1.ev" >&2; return 1; }
}

for n in dw none; do
    check "thread_stacks_${n}_same_output" same_output $n
    check "thread_stacks_${n}_getattr_equals_proc_maps" facts_agree $n
    check "thread_stacks_${n}_peaks_are_the_stacks" peaks $n
    check "thread_stacks_${n}_calls_are_the_programs" calls_are_the_programs $n
    check "thread_stacks_${n}_mapped_named_unmapped_per_thread" all_stacks $n
    check "thread_stacks_${n}_user_stack_is_the_programs" user_stack_not_a_thread_stack $n
done
exit $status
