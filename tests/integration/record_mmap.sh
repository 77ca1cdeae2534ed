# record_mmap.sh — the mappings of format 1.4 (FORMAT.md, "Mappings"):
# tests/progs/mmap_named under `poolscope record` (dwarf stacks, the
# default, and none), checked event by event with pre_dump -v against the
# addresses, lengths, prot and paths the program wrote down: the MPROTECT
# that commits 4 MiB of a 64 MiB PROT_NONE reservation, MMAP_NAME with the
# real path of the file right after its MMAP (and " (deleted)" once the
# file is gone), and nothing for a failed mprotect, a failed mmap or an
# anonymous mapping given an fd, nor for the program's attempt to forge
# both through the event API. The program's output and exit status are
# the same as without the tracer, and memcheck finds nothing in the new
# hook paths.
. tests/integration/lib.sh
PRE=$B/tests/progs/pre_dump

# run NAME [record flags]: one traced run, its facts and its event listing
run() {
    n=$1; shift
    mkdir -p "$T/$n"
    "$PS" record -o "$T/$n.pst" "$@" -- "$P/mmap_named" -d "$T/$n" -f "$T/$n.facts" \
        >"$T/$n.out" 2>"$T/$n.err"
    echo $? >"$T/$n.rc"
    "$PRE" -v "$T/$n.pst" >"$T/$n.ev"
    "$DUMP" "$T/$n.pst" >"$T/$n.dump"
}
plain() {
    mkdir -p "$T/plain"
    "$P/mmap_named" -d "$T/plain" -f "$T/plain.facts" >"$T/plain.out" 2>&1
    echo $? >"$T/plain.rc"
}
plain
run dw
run none --stacks none

# the events of NAME at address ADDR (pre_dump -v: stream tid seq ts name fields...)
events_at() { awk -v t="$2" -v a="$3" '$5 == t && $6 == a' "$T/$1.ev"; }

same_output() {
    [ "$(cat "$T/plain.rc")" = 0 ] && [ "$(cat "$T/$1.rc")" = 0 ] && cmp -s "$T/plain.out" "$T/$1.out" ||
        { echo "  rc $(cat "$T/$1.rc"), output differs:" >&2; diff "$T/plain.out" "$T/$1.out" >&2; return 1; }
    # errno of the failed calls came through the hooks unchanged
    grep -qx 'mmap on a closed fd: MAP_FAILED errno=EBADF' "$T/$1.out" &&
        grep -qx 'unaligned mprotect: -1 errno=EINVAL' "$T/$1.out"
}
complete() {
    [ "$(key "$T/$1.dump" complete)" = 1 ] && [ "$(key "$T/$1.dump" lost)" = 0 ] ||
        { echo "  trace of $1 not complete:" >&2; cat "$T/$1.dump" >&2; return 1; }
}
# the commit: one MPROTECT with the program's address, length and prot
mprotect_commit() {
    f=$T/$1.facts
    got=$(events_at "$1" mprotect "$(key "$f" mprotect_addr)")
    [ "$(echo "$got" | awk 'NF { print $7, $8 }')" = "$(key "$f" mprotect_len) $(key "$f" mprotect_prot)" ] &&
        [ "$(echo "$got" | grep -c .)" = 1 ] ||
        { echo "  want mprotect $(key "$f" mprotect_addr) $(key "$f" mprotect_len) $(key "$f" mprotect_prot), got:" >&2
          grep mprotect "$T/$1.ev" >&2; return 1; }
    # and the reservation it commits: MMAP of 64 MiB, PROT_NONE
    events_at "$1" mmap "$(key "$f" reserve)" | awk -v l="$(key "$f" reserve_len)" '$7 == l && $8 == 0 { ok = 1 } END { exit !ok }'
}
failed_mprotect_not_recorded() {
    [ -z "$(events_at "$1" mprotect "$(key "$T/$1.facts" bad_mprotect_addr)")" ]
}
# MMAP_NAME names the file (realpath equal) and is the next event of its MMAP's stream
file_named() {
    f=$T/$1.facts
    a=$(key "$f" file_map)
    m=$(events_at "$1" mmap "$a"); nm=$(events_at "$1" mmap_name "$a")
    [ "$(echo "$m" | grep -c .)" = 1 ] && [ "$(echo "$nm" | grep -c .)" = 1 ] ||
        { echo "  mmap/mmap_name at $a: [$m] [$nm]" >&2; return 1; }
    [ "$(echo "$nm" | cut -d' ' -f7-)" = "\"$(key "$f" file_path)\"" ] ||
        { echo "  name [$nm], want $(key "$f" file_path)" >&2; return 1; }
    set -- $m; ms=$1 mq=$3
    set -- $nm
    [ "$1" = "$ms" ] && [ "$3" = $((mq + 1)) ] || { echo "  [$nm] does not follow [$m]" >&2; return 1; }
}
deleted_named() {
    f=$T/$1.facts
    [ "$(events_at "$1" mmap_name "$(key "$f" deleted_map)" | cut -d' ' -f7-)" = "\"$(key "$f" file_path) (deleted)\"" ] ||
        { echo "  names: $(grep mmap_name "$T/$1.ev")" >&2; return 1; }
}
# no name for an anonymous mapping given an fd, nor for a failed mmap
no_stray_names() {
    [ -z "$(events_at "$1" mmap_name "$(key "$T/$1.facts" anon_fd_map)")" ] &&
        [ -z "$(events_at "$1" mmap_name 0x0)" ] &&
        events_at "$1" mmap 0x0 | grep -q . &&                  # the failed mmap itself is there
        [ "$(awk '$5 == "mmap_name"' "$T/$1.ev" | wc -l)" -eq 2 ] ||
        { echo "  names: $(grep mmap_name "$T/$1.ev")" >&2; return 1; }
}

# the event API refuses both types (the program tries to forge them)
api_refused() {
    [ -z "$(events_at "$1" mprotect 0x1000)" ] && [ -z "$(events_at "$1" mmap_name 0x1000)" ] &&
        ! grep -q forged "$T/$1.ev"
}

for r in dw none; do
    check "${r}_output_and_status_as_untraced" same_output $r
    check "${r}_trace_complete" complete $r
    check "${r}_mprotect_commits_part_of_reservation" mprotect_commit $r
    check "${r}_failed_mprotect_not_recorded" failed_mprotect_not_recorded $r
    check "${r}_mmap_name_is_file_realpath_after_its_mmap" file_named $r
    check "${r}_mmap_name_of_deleted_file" deleted_named $r
    check "${r}_no_name_for_anonymous_or_failed_mmap" no_stray_names $r
    check "${r}_event_api_refuses_mapping_events" api_refused $r
done
# pstdump counts the new types by name
check pstdump_counts_new_types sh -c "grep -qx 'mprotect=1' '$T/none.dump' && grep -qx 'mmap_name=2' '$T/none.dump'"

# the report reads them through the model: the reservation apart from
# committed memory, and the file mappings by name (the program's facts)
report_mappings() {
    "$PS" report "$T/none.pst" --json --no-symbols >"$T/none.json" &&
        "$PS" report "$T/none.pst" --no-symbols >"$T/none.txt" || return 1
    python3 - "$T/none.json" "$T/none.facts" "$T/none.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
f = dict(l.strip().split('=', 1) for l in open(sys.argv[2]) if '=' in l)
txt = open(sys.argv[3]).read()
res, com, flen = int(f['reserve_len']), int(f['mprotect_len']), int(f['file_len'])
# reserved at its peak: the whole reservation, before mprotect committed part of it
assert r['peak_mmap_reserved_bytes'] == res, (r['peak_mmap_reserved_bytes'], res)
# committed at its peak: the 4 MiB made read-write, plus the small mappings
# alive then (the file's 64 KiB and one or two 4 KiB pages), never the reservation
assert com <= r['peak_mmap_committed_bytes'] <= com + flen + 2 * 4096, r['peak_mmap_committed_bytes']
assert f['file_path'] + '\n' in txt and f['file_path'] + ' (deleted)' in txt, txt
PY
}
check report_reserved_committed_and_named_files report_mappings

# the new hook paths under memcheck (valgrind.sh's way: `env` sets the
# preload for the program only): no error, same output, the events there
vg_hooks() {
    command -v valgrind >/dev/null 2>&1 || { echo "  valgrind is not installed" >&2; return 1; }
    mkdir -p "$T/vg"
    valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite -q --trace-children=yes \
        env LD_PRELOAD="$PRELOAD" POOLSCOPE_OUT="$T/vg/t.pst" POOLSCOPE_MANIFEST="$T/vg/manifest" \
        "$P/mmap_named" -d "$T/vg" -f "$T/vg.facts" >"$T/vg.out" 2>"$T/vg.err" ||
        { echo "  valgrind: exit $?" >&2; grep -m 30 '^==' "$T/vg.err" >&2; return 1; }
    cmp -s "$T/plain.out" "$T/vg.out" || { diff "$T/plain.out" "$T/vg.out" >&2; return 1; }
    prog=$(realpath "$P/mmap_named")
    for f in $(cut -f2 "$T/vg/manifest"); do
        "$DUMP" "$f" >"$T/vg.dump" || return 1
        [ "$(key "$T/vg.dump" exe)" = "$prog" ] || continue
        [ "$(key "$T/vg.dump" complete)" = 1 ] && [ "$(key "$T/vg.dump" mprotect)" = 1 ] &&
            [ "$(key "$T/vg.dump" mmap_name)" = 2 ] && return 0
        echo "  under valgrind:" >&2; cat "$T/vg.dump" >&2; return 1
    done
    echo "  no trace of $prog in the manifest" >&2
    return 1
}
check valgrind_clean_with_mapping_hooks vg_hooks
exit $status
