#!/bin/sh
# symbols_cxx.sh — C++ functions with internal linkage named as
# `addr2line -C` names them (issue 27, item 5): a static function with its
# parameter list ("work(int, int)", not DW_AT_name's "work"), one in an
# anonymous namespace with its scope, a static function template with its
# template arguments and return type (as the demangler prints the
# symbol); every displayed frame compared with addr2line (binutils, or
# llvm-addr2line where they differ) by sites_addr2line.py. Expected names
# come from nm -C and addr2line, lines from the source's markers.
. tests/integration/lib.sh
command -v g++ >/dev/null && command -v addr2line >/dev/null ||
    { echo "ok symbols_cxx_skipped_no_toolchain"; exit 0; }
SRC=tests/cxx/sites_static.cpp
line_of() { grep -n "// $1\$" "$ROOT/$SRC" | head -1 | cut -d: -f1; }

g++ -std=c++17 -O1 -g -o "$T/ss" "$ROOT/$SRC" || exit 1
"$PS" record -o "$T/ss.pst" -- "$T/ss" >/dev/null 2>&1
"$PS" report "$T/ss.pst" --top 20 --full >"$T/ss.txt"   # --full: names whole, template arguments too
"$PS" sql "$T/ss.pst" -o "$T/ss.db" >/dev/null

names() {
    nm -C "$T/ss" >"$T/nm.txt" || return 1
    for f in 'work(int, int)' '(anonymous namespace)::anon_alloc(int, int)' 'double* make_array<double>(int)'; do
        grep -qF " $f" "$T/nm.txt" || { echo "  nm -C has no '$f'" >&2; return 1; }
    done
    for want in "work(int, int) (sites_static.cpp:$(line_of STATIC_SITE_WORK)) < main" \
                "(anonymous namespace)::anon_alloc(int, int) (sites_static.cpp:$(line_of STATIC_SITE_ANON)) < main" \
                "double* make_array<double>(int) (sites_static.cpp:$(line_of STATIC_SITE_TEMPLATE)) < main" \
                "inl_alloc (sites_static.cpp:$(line_of STATIC_SITE_INLINE)) [inlined] < main"; do
        grep -qF "$want" "$T/ss.txt" || { echo "  report lacks '$want':" >&2; grep ' < ' "$T/ss.txt" | sort -u >&2; return 1; }
    done
}
check static_and_anonymous_namespace_names_with_parameters names
check static_frames_equal_addr2line python3 "$ROOT/tests/integration/sites_addr2line.py" "$T/ss.db" 10
folded() {
    "$PS" export "$T/ss.pst" --format folded -o "$T/ss.folded" &&
        grep -qF ';work(int, int) ' "$T/ss.folded" &&
        grep -qF ';(anonymous namespace)::anon_alloc(int, int) ' "$T/ss.folded" || { cat "$T/ss.folded" >&2; return 1; }
}
check static_names_in_folded folded

exit $status
