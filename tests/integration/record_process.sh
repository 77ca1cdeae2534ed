# record_process.sh — every process image gets its own readable trace: fork
# children, fork+exec, posix_spawn, an exec chain; no file is overwritten.
. tests/integration/lib.sh

# images MODE ARGS...: record forkexec MODE into $T/MODE/, then check the
# summary lists as many traces as the program made images, each a distinct
# complete file in that directory with some mallocs of its own.
images() {
    m=$1; shift
    d=$T/$m; mkdir -p "$d"
    "$PS" record -o "$d/t.pst" -- "$P/forkexec" "$m" "$@" >"$d/out" 2>"$d/err" ||
        { echo "  record failed: $(cat "$d/err")" >&2; return 1; }
    want=$(key "$d/out" images)
    sed -n 's/^poolscope: pid [0-9]*: \(.*\): [0-9]* events.*/\1/p' "$d/err" | sort >"$d/listed"
    got=$(wc -l <"$d/listed")
    uniq=$(sort -u "$d/listed" | wc -l)
    files=$(ls "$d" | grep -c '\.pst$')
    [ "$got" -eq "$want" ] && [ "$uniq" -eq "$want" ] && [ "$files" -eq "$want" ] ||
        { echo "  want $want images; listed $got ($uniq distinct), files $files" >&2; cat "$d/err" >&2; return 1; }
    while read -r f; do
        case $f in "$d"/*) ;; *) echo "  $f not in $d" >&2; return 1 ;; esac
        "$DUMP" "$f" >"$f.dump" || return 1
        [ "$(key "$f.dump" complete)" = 1 ] && [ "$(key "$f.dump" malloc)" -ge 10 ] ||
            { echo "  $f: incomplete or empty" >&2; cat "$f.dump" >&2; return 1; }
    done <"$d/listed"
}
check fork_child_own_trace images fork
check fork_exec_own_traces images forkexec
check posix_spawn_own_trace images spawn
check exec_chain_own_traces images chain 3

# The chain: one pid, generations 0..3.
chain_gens() {
    d=$T/chain
    for f in $(cat "$d/listed"); do key "$f.dump" exec_gen; done | sort -n | tr '\n' ' ' >"$d/gens"
    pids=$(for f in $(cat "$d/listed"); do key "$f.dump" pid; done | sort -u | wc -l)
    [ "$(cat "$d/gens")" = "0 1 2 3 " ] && [ "$pids" -eq 1 ]
}
check exec_chain_generations chain_gens

# The fork child's trace names its parent.
fork_parent() {
    d=$T/fork
    ppid=$(key "$d/t.pst.dump" pid)
    for f in $(cat "$d/listed"); do
        [ "$f" = "$d/t.pst" ] && continue
        [ "$(key "$f.dump" parent_pid)" = "$ppid" ] || return 1
    done
}
check fork_child_names_parent fork_parent

# A second run in the same directory overwrites nothing.
no_overwrite() {
    d=$T/fork
    ls "$d"/*.pst | sort >"$T/before.list"
    for f in $(cat "$T/before.list"); do cksum "$f"; done >"$T/before.sum"
    "$PS" record -o "$d/t2.pst" -- "$P/forkexec" fork >/dev/null 2>"$T/second.err" || return 1
    for f in $(cat "$T/before.list"); do cksum "$f"; done >"$T/after.sum"
    cmp -s "$T/before.sum" "$T/after.sum" && [ "$(ls "$d"/*.pst | wc -l)" -eq 4 ]
}
check second_run_overwrites_nothing no_overwrite
exit $status
