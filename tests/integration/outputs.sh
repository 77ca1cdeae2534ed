#!/bin/sh
# outputs.sh — outputs never harm inputs (issue 12, item 5): an output that
# is the trace (same name, symlink, hard link) is refused; nothing but a
# file we made is removed or truncated (a device node, a FIFO); a failed
# write (EFBIG under `ulimit -f`, /dev/full, gnuplot failing, a bad
# --replay file) leaves no partial output and the old output as it was;
# stdout write errors are exit 2 with one line; traces are read from pipes.
# Every data-loss case checks the input's checksum and the directory listing.
. tests/integration/lib.sh

D=$T/w
mkdir -p "$D"
"$PS" record -o "$D/x.pst" -- "$B/bin/refengine" --synthetic dim=32,layers=1,heads=2,kv_heads=2,hidden=64,vocab=64,seq=64 \
    --workload fixed:8,8 --requests 3 --max-batch 2 --quiet > /dev/null 2>&1
check record_trace [ -s "$D/x.pst" ]
sum0=$(cksum < "$D/x.pst")
intact() { [ "$(cksum < "$D/x.pst")" = "$sum0" ]; }
# the directory holds exactly the names given (no temporary or partial file)
only() {
    got=$(cd "$D" && ls -A | sort | tr '\n' ' ')
    want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
    [ "$got" = "$want" ] || { echo "  directory has: $got; want: $want" >&2; return 1; }
}
# refused CMD...: exit 2, one line on stderr, trace intact, nothing new
refused() {
    "$@" > "$T/out" 2> "$T/err"; rc=$?
    [ $rc -eq 2 ] || { echo "  exit $rc: $(cat "$T/err")" >&2; return 1; }
    [ "$(wc -l < "$T/err")" -eq 1 ] || { cat "$T/err" >&2; return 1; }
    intact
}

ln -s x.pst "$D/link.pst"
ln "$D/x.pst" "$D/hard.pst"
check sql_onto_trace_refused refused "$PS" sql "$D/x.pst" -o "$D/x.pst"
check sql_onto_symlink_refused refused "$PS" sql "$D/x.pst" -o "$D/link.pst"
check sql_onto_hardlink_refused refused "$PS" sql "$D/x.pst" -o "$D/hard.pst"
check export_folded_onto_trace_refused refused "$PS" export "$D/x.pst" --format folded -o "$D/x.pst"
check export_onto_symlink_refused refused "$PS" export "$D/x.pst" --format chrome -o "$D/link.pst"
check export_onto_hardlink_refused refused "$PS" export "$D/x.pst" --format folded -o "$D/hard.pst"
check export_via_symlinked_input_refused refused "$PS" export "$D/link.pst" --format folded -o "$D/x.pst"
check plot_onto_trace_refused refused "$PS" plot "$D/x.pst" -o "$D/x.pst"
check refusals_left_nothing only x.pst link.pst hard.pst
check symlink_still_a_symlink [ -L "$D/link.pst" ]
rm -f "$D/link.pst" "$D/hard.pst"

# a device node and a FIFO are never removed nor replaced by a regular file
mkfifo "$D/fifo"
check sql_onto_fifo_refused refused "$PS" sql "$D/x.pst" -o "$D/fifo"
check fifo_still_a_fifo [ -p "$D/fifo" ]
if [ "$(id -u)" = 0 ] && mknod "$D/full" c 1 7 2>/dev/null; then
    check sql_onto_device_refused refused "$PS" sql "$D/x.pst" -o "$D/full"
    check device_still_a_device [ -c "$D/full" ]
    "$PS" export "$D/x.pst" --format chrome -o "$D/full" 2> "$T/err"; rc=$?
    check export_to_full_device_exit_2 sh -c "[ $rc -eq 2 ] && grep -q 'No space left' '$T/err'"
    check device_still_a_device_after_export [ -c "$D/full" ]
    rm -f "$D/full"
else
    echo "ok device_node_cases_skipped_not_root"
fi
rm -f "$D/fifo"

# a write that fails part-way (file size limit: EFBIG) leaves no partial
# output, and an old output stays as it was
fsz() { (trap '' XFSZ; ulimit -f 8; "$@"); }     # 8 blocks of 512 bytes
check sql_fails_under_fsize_limit refused fsz "$PS" sql "$D/x.pst" -o "$D/new.db"
check sql_failure_left_nothing only x.pst
check export_fails_under_fsize_limit refused fsz "$PS" export "$D/x.pst" --format chrome -o "$D/new.json"
check export_failure_left_nothing only x.pst
# the same without the shell ignoring SIGXFSZ: poolscope ignores it itself
check export_fails_under_fsize_limit_untrapped refused sh -c "ulimit -f 8; exec '$PS' export '$D/x.pst' --format chrome -o '$D/new.json'"
check untrapped_failure_left_nothing only x.pst
sqlite3 "$D/old.db" "create table old(x); insert into old values(1)"; old=$(cksum < "$D/old.db")   # a database of the user's
check sql_fails_over_old_db refused fsz "$PS" sql "$D/x.pst" -o "$D/old.db"
check old_db_kept [ "$(cksum < "$D/old.db")" = "$old" ]
check sql_replaces_old_db_when_done "$PS" sql "$D/x.pst" -o "$D/old.db" --quiet
check replaced_db_is_sqlite sh -c "[ \$(sqlite3 '$D/old.db' 'select count(*) from meta') -gt 0 ]"
check after_replace_only_db only x.pst old.db
rm -f "$D/old.db"

# plot: a bad --replay file is refused before anything is drawn; a failing
# gnuplot leaves neither a new directory nor changes in an existing one
echo '{"not": "replay"}' > "$T/bad_replay.json"
check plot_bad_replay_refused refused "$PS" plot "$D/x.pst" -o "$D/plots" --replay "$T/bad_replay.json"
check plot_bad_replay_left_nothing only x.pst
mkdir -p "$T/fakebin"
printf '#!/bin/sh\nexit 1\n' > "$T/fakebin/gnuplot"; chmod +x "$T/fakebin/gnuplot"
check plot_gnuplot_failing_refused refused env PATH="$T/fakebin:$PATH" "$PS" plot "$D/x.pst" -o "$D/plots"
check plot_failure_left_no_directory only x.pst
mkdir "$D/plots"; echo keep > "$D/plots/memory.png"; echo mine > "$D/plots/notes.txt"
check plot_failure_into_existing_dir refused env PATH="$T/fakebin:$PATH" "$PS" plot "$D/x.pst" -o "$D/plots"
check existing_plot_files_kept sh -c "[ \"\$(cat '$D/plots/memory.png')\" = keep ] && [ \$(ls -A '$D/plots' | wc -l) -eq 2 ]"
check plot_into_existing_dir_succeeds sh -c "'$PS' plot '$D/x.pst' -o '$D/plots' --quiet"
check plot_replaced_png_keeps_other_files python3 -c "
import os
d = '$D/plots'
assert open(d + '/memory.png', 'rb').read()[:4] == b'\x89PNG'
assert open(d + '/notes.txt').read() == 'mine\n'
assert not [n for n in os.listdir(d) if n.startswith('.')], os.listdir(d)
"
"$PS" plot "$D/x.pst" -o "$D/fresh" > "$T/made"
check plot_lists_final_paths sh -c "grep -qx '$D/fresh/memory.png' '$T/made' && [ -s '$D/fresh/memory.png' ]"
check plot_left_no_temp_dir sh -c "! ls -A '$D' | grep -q '^\.'"
rm -rf "$D/plots" "$D/fresh"
check plot_success_intact intact

# stdout write errors: exit 2 and one line naming standard output
if [ -w /dev/full ]; then
    for c in "report_text:report $D/x.pst" "report_json:report $D/x.pst --json" "diff:diff $D/x.pst $D/x.pst" \
             "gate:gate $D/x.pst --max leaked_bytes=1GiB" "sql:sql $D/x.pst -o $D/s.db"; do
        n=${c%%:*}
        $PS ${c#*:} > /dev/full 2> "$T/err"; rc=$?
        check "stdout_full_${n}_exit_2" sh -c "[ $rc -eq 2 ] && [ \$(wc -l < '$T/err') -eq 1 ] && grep -q 'cannot write standard output' '$T/err'"
    done
    rm -f "$D/s.db"
fi

# pipes: sql, export, gate and report read standard input ("-")
"$PS" sql "$D/x.pst" -o "$T/file.db" --quiet
cat "$D/x.pst" | "$PS" sql - -o "$T/pipe.db" --quiet; rc=$?
check sql_reads_pipe sh -c "[ $rc -eq 0 ] && [ \"\$(sqlite3 '$T/pipe.db' 'select count(*) from events')\" = \"\$(sqlite3 '$T/file.db' 'select count(*) from events')\" ]"
cat "$D/x.pst" | "$PS" export - --format folded -o "$T/pipe.folded"; rc=$?
"$PS" export "$D/x.pst" --format folded -o "$T/file.folded"
check export_reads_pipe sh -c "[ $rc -eq 0 ] && cmp -s '$T/pipe.folded' '$T/file.folded'"
"$PS" report "$D/x.pst" --json --no-symbols > "$T/base.json"
cat "$D/x.pst" | "$PS" gate - --baseline "$T/base.json" > "$T/g.out" 2>&1; rc=$?
check gate_reads_pipe sh -c "[ $rc -eq 0 ] && grep -q 'gate: passed' '$T/g.out'"
cat "$D/x.pst" | "$PS" gate /dev/stdin --max leaked_bytes=1GiB > /dev/null 2>&1
check gate_reads_dev_stdin [ $? -eq 0 ]
cat "$T/base.json" | "$PS" gate "$D/x.pst" --baseline /dev/stdin > /dev/null 2>&1
check gate_baseline_from_pipe [ $? -eq 0 ]
check sql_pipe_input_onto_itself_refused sh -c "! '$PS' sql - -o '$D/x.pst' < '$D/x.pst' 2>/dev/null"
check pipes_intact intact

# sql replaces an existing file only when it is a database
echo "my notes" > "$T/notes.txt"
"$PS" sql "$D/x.pst" -o "$T/notes.txt" > /dev/null 2> "$T/notes.err"; rc=$?
check sql_keeps_a_file_that_is_not_a_database sh -c "[ $rc -eq 2 ] && [ \"\$(cat '$T/notes.txt')\" = 'my notes' ] && grep -q 'not an SQLite database' '$T/notes.err'"
"$PS" sql "$D/x.pst" -o "$T/again.db" --quiet && "$PS" sql "$D/x.pst" -o "$T/again.db" --quiet
check sql_replaces_its_own_database [ $? -eq 0 ]

# -o - writes to standard output: the same bytes as a file, no file named "-"
(cd "$T" && "$PS" export "$D/x.pst" --format folded -o - > "$T/stdout.folded"); rc=$?
check export_to_stdout_equals_file sh -c "[ $rc -eq 0 ] && cmp -s '$T/stdout.folded' '$T/file.folded' && [ ! -e '$T/-' ]"
(cd "$T" && "$PS" export "$D/x.pst" --format chrome -o - | python3 -c 'import json,sys; json.load(sys.stdin)'); rc=$?
check export_chrome_to_stdout_is_json [ $rc -eq 0 ]
if [ -w /dev/full ]; then
    "$PS" export "$D/x.pst" --format folded -o - > /dev/full 2> "$T/full.err"; rc=$?
    check export_stdout_write_error_exit_2 sh -c "[ $rc -eq 2 ] && grep -q 'cannot write standard output' '$T/full.err'"
fi
exit $status
