# layers.sh — scripts/check-layers.sh passes on the tree as it is, and fails
# (exit 1, naming file:line) on copies of the tree with an include that goes
# up the graph: an analyzer header in pool/, a libtrace-only public header in
# reference-engine/, a pool header in common/, an interposer header in
# libtrace/. The event API header stays allowed in reference-engine/; a file
# in a folder the table does not know and a README without the table are
# refused (exit 2). Inside the reader and the interposer, the order of
# stages: a later stage's header included by an earlier stage, a call from
# an earlier stage to a later one (declared locally, so only nm sees it),
# a new upward call in the interposer (one not in the script's allowed
# list), a reader file in no stage. The real sources are never modified.
. tests/integration/lib.sh
CHECK="sh $ROOT/scripts/check-layers.sh"

check layers $CHECK "$ROOT"
# the include graph alone from here on (the stages' checks compile their
# files each time); the stages' own tests below ask for them
export CHECK_LAYERS_STAGES=

# a copy of the sources and the README (no build output, no git)
TREE=$T/tree
mkdir -p "$TREE" &&
    tar -C "$ROOT" --exclude=./build --exclude='./build*' --exclude=./.git -cf - . | tar -C "$TREE" -xf - ||
    { echo "not ok layers_tree_copied"; exit 1; }

# add_include FILE HEADER: a copy of the tree with `#include "HEADER"` after
# the first include of FILE; prints the tree and sets LINE to its line
add_include() {
    rm -rf "$T/t"; cp -r "$TREE" "$T/t" || return 1
    LINE=$(grep -n -m1 '^#include' "$T/t/$1" | cut -d: -f1)
    [ -n "$LINE" ] || { echo "  $1 has no #include" >&2; return 1; }
    LINE=$((LINE + 1))
    sed -i "$((LINE - 1))a #include \"$2\"" "$T/t/$1"
    [ "$(sed -n "${LINE}p" "$T/t/$1")" = "#include \"$2\"" ]
}
# rejects FILE HEADER: exit 1, and the one line of the report names FILE:LINE
rejects() {
    add_include "$1" "$2" || return 1
    $CHECK "$T/t" >"$T/out" 2>&1; rc=$?
    [ $rc -eq 1 ] || { echo "  exit $rc for $1 including $2:" >&2; cat "$T/out" >&2; return 1; }
    [ "$(grep -c "^$1:$LINE: #include \"$2\"" "$T/out")" -eq 1 ] &&
        [ "$(grep -c '^[a-z].*:[0-9]*: ' "$T/out")" -eq 1 ] ||
        { echo "  report does not name $1:$LINE alone:" >&2; cat "$T/out" >&2; return 1; }
}
accepts() {
    add_include "$1" "$2" || return 1
    $CHECK "$T/t" >"$T/out" 2>&1 || { echo "  $1 including $2 refused:" >&2; cat "$T/out" >&2; return 1; }
}

check layers_rejects_upward_include rejects pool/bufpool.c metrics.h
check layers_rejects_public_header_above rejects common/fmt.c poolscope/bufpool.h
check layers_reference_engine_rejects_reader rejects reference-engine/engine.c poolscope/reader.h
check layers_reference_engine_accepts_event_api accepts reference-engine/engine.c poolscope/pool_adapter.h
check layers_rejects_preload_header_in_libtrace rejects libtrace/api.c preload.h
check layers_tests_include_everything accepts tests/test_bufpool.c metrics.h

unknown_folder() {
    rm -rf "$T/t"; cp -r "$TREE" "$T/t" && mkdir "$T/t/newcomp" && echo 'int x;' >"$T/t/newcomp/a.c" || return 1
    $CHECK "$T/t" >"$T/out" 2>&1; rc=$?
    [ $rc -eq 2 ] && grep -q '^check-layers: newcomp/a.c: in no folder' "$T/out" ||
        { echo "  exit $rc:" >&2; cat "$T/out" >&2; return 1; }
}
check layers_unknown_folder_refused unknown_folder

no_table() {
    rm -rf "$T/t"; cp -r "$TREE" "$T/t" && sed -i '/<!-- layers:begin/,/<!-- layers:end/d' "$T/t/README.md" || return 1
    $CHECK "$T/t" >"$T/out" 2>&1; rc=$?
    [ $rc -eq 2 ] && grep -q 'no layer table' "$T/out"
}
check layers_readme_without_table_refused no_table

# ---- the order of stages inside the reader and the interposer ----
# rejects_stage FILE PATTERN: exit 1, and the one line of the report (the
# lines not the script's own summaries) is FILE's and matches PATTERN
rejects_stage() {
    $CHECK "$T/t" >"$T/out" 2>&1; rc=$?
    [ $rc -eq 1 ] || { echo "  exit $rc:" >&2; cat "$T/out" >&2; return 1; }
    [ "$(grep -v '^check-layers: ' "$T/out" | grep -c .)" -eq 1 ] &&
        grep -v '^check-layers: ' "$T/out" | grep "^$1" | grep -q "$2" ||
        { echo "  report does not name $1 alone:" >&2; cat "$T/out" >&2; return 1; }
}
# add_call FILE DECL CALL: a copy of the tree with a function at the end of
# FILE that makes CALL (DECL declares what it calls, when FILE's headers
# do not)
add_call() {
    rm -rf "$T/t"; cp -r "$TREE" "$T/t" || return 1
    printf '\n%s\nvoid layers_probe(void);\nvoid layers_probe(void) { %s; }\n' "$2" "$3" >>"$T/t/$1"
}
export CHECK_LAYERS_STAGES=reader
stage_include() {
    add_include libtrace/rd_decode.c rd_merge.h &&
        rejects_stage "libtrace/rd_decode.c:$LINE: " 'rd_merge.h" is of a later stage (rd_merge) than the file (rd_decode)'
}
check layers_reader_rejects_later_stage_header stage_include
stage_call() {
    add_call libtrace/rd_chunk.c 'struct rd_queued; int rd_decode_chunk(pst_reader_t *r, struct rd_queued *q);' \
        'rd_decode_chunk(0, 0)' &&
        rejects_stage "libtrace/rd_chunk.c: calls rd_decode_chunk " 'later stage (rd_decode) than the file (rd_chunk)'
}
check layers_reader_rejects_upward_call stage_call
stage_call_down() {
    add_call libtrace/rd_merge.c '' 'rd_set_corrupt(0, 0, "")' && $CHECK "$T/t" >"$T/out" 2>&1 ||
        { cat "$T/out" >&2; return 1; }
}
check layers_reader_accepts_downward_call stage_call_down
preload_call() {
    add_call libtrace/preload/sys.c '' 'ps_final()' &&
        rejects_stage "libtrace/preload/sys.c: calls ps_final " 'later stage (end) than the file (sys)'
}
CHECK_LAYERS_STAGES=interposer
check layers_interposer_rejects_new_upward_call preload_call
CHECK_LAYERS_STAGES=reader
reader_unknown() {
    rm -rf "$T/t"; cp -r "$TREE" "$T/t" && echo 'int rd_x;' >"$T/t/libtrace/rd_extra.c" || return 1
    $CHECK "$T/t" >"$T/out" 2>&1; rc=$?
    [ $rc -eq 2 ] && grep -q '^check-layers: libtrace/rd_extra.c: in no stage' "$T/out" ||
        { echo "  exit $rc:" >&2; cat "$T/out" >&2; return 1; }
}
check layers_reader_file_in_no_stage_refused reader_unknown
exit $status
