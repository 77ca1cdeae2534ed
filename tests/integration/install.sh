# install.sh — `make install` into a scratch prefix, from the tree already
# built in $BUILD, and the installed package used the way a user would: the
# files are where the Makefile says, each installed header compiles on its
# own against the installed include directory, a program built with
# `pkg-config --cflags --libs poolscope` (tests/progs/api_client.c) runs
# under the INSTALLED `poolscope record`, which finds the installed preload
# library; its markers and tensor events are in the trace and its output is
# the same as untraced. The headers also compile as strict C11 and as C++11
# and C++17 (g++ and clang++, -Wall -Wextra -Werror), and a C++ program
# (tests/cxx/api_link.cpp: event API, writer and reader, both pools) builds
# with `pkg-config --cflags --libs poolscope poolscope-pool`, runs, and is
# traced by the installed record like a C program.
. tests/integration/lib.sh
PFX=$T/prefix
INC=$PFX/include/poolscope   # the headers; users include <poolscope/NAME.h> with -I$PFX/include
export PKG_CONFIG_PATH=$PFX/lib/pkgconfig

# ---- make install, same BUILD: the built tree is used as it is ----
do_install() {
    make --no-print-directory install PREFIX="$PFX" BUILD="$BUILD" >"$T/install.log" 2>&1 ||
        { tail -20 "$T/install.log" >&2; return 1; }
    # a note, not a failure: another engineer's edit may legitimately need a recompile
    n=$(grep -c -- ' -c .*\.c -o ' "$T/install.log")
    [ "$n" -eq 0 ] || echo "  note: make install compiled $n file(s) in $BUILD" >&2
    return 0
}
check make_install do_install

# ---- the installed files ----
files_present() {
    miss=0
    for f in bin/poolscope lib/poolscope/libpoolscope-preload.so lib/libpstrace.a lib/libpool.a \
        lib/libpscommon.a \
        lib/pkgconfig/poolscope.pc lib/pkgconfig/poolscope-pool.pc \
        include/poolscope/poolscope.h include/poolscope/format.h include/poolscope/reader.h \
        include/poolscope/writer.h include/poolscope/pool_adapter.h include/poolscope/bufpool.h \
        include/poolscope/blockpool.h include/poolscope/error.h \
        share/doc/poolscope/FORMAT.md share/doc/poolscope/SCHEMA.md share/doc/poolscope/REPORT.md; do
        [ -s "$PFX/$f" ] || { echo "  missing: \$PREFIX/$f" >&2; miss=1; }
    done
    # refengine is installed when it is built
    if [ -x "$B/bin/refengine" ] && [ ! -x "$PFX/bin/refengine" ]; then
        echo "  missing: \$PREFIX/bin/refengine" >&2; miss=1
    fi
    [ -x "$PFX/bin/poolscope" ] || { echo "  \$PREFIX/bin/poolscope not executable" >&2; miss=1; }
    [ -x "$PFX/bin/poolscope-malloc-helper" ] || { echo "  missing: \$PREFIX/bin/poolscope-malloc-helper" >&2; miss=1; }
    [ $miss -eq 0 ]
}
check installed_files_present files_present

# every key report --json writes is in the installed REPORT.md (by its name)
keys_documented() {
    "$B/bin/refengine" --help > /dev/null 2>&1 || return 1
    "$PS" record -o "$T/doc.pst" -- "$B/bin/refengine" --quiet > /dev/null 2>&1 &&
        "$PS" report "$T/doc.pst" --json --no-symbols --top 1 > "$T/doc.json" || return 1
    python3 - "$T/doc.json" "$PFX/share/doc/poolscope/REPORT.md" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
doc = set(re.findall(r'`([^`]+)`', open(sys.argv[2]).read()))
words = {w.split('.')[-1] for t in doc for w in re.split(r'[ ,]+', t)}
miss = []
def walk(v, path):
    if isinstance(v, dict) and path not in ('sites',) and not path.startswith('phases.'):
        for k, x in v.items():
            walk(x, path + '.' + k if path else k)
    elif path != 'sites' and path.split('.')[-1] not in words and not path.startswith('phases.'):
        miss.append(path)
walk(d, '')
assert not miss, 'not in REPORT.md: %s' % miss
PY
}
check report_json_keys_documented keys_documented
check installed_cli_runs sh -c "'$PFX/bin/poolscope' --version | grep -q '^poolscope [0-9]'"

pc_prefix() {
    for m in poolscope poolscope-pool; do
        c=$(pkg-config --cflags "$m") && l=$(pkg-config --libs "$m") || return 1
        c=$(echo $c)
        [ "$c" = "-I$PFX/include" ] || { echo "  $m cflags: $c" >&2; return 1; }
        case " $l " in *" -L$PFX/lib "*) ;; *) echo "  $m libs: $l" >&2; return 1 ;; esac
    done
    pkg-config --libs poolscope | grep -q -- '-lpstrace' &&
        pkg-config --libs poolscope-pool | grep -q -- '-lpool'
}
check pkgconfig_points_at_prefix pc_prefix

# every installed header compiles alone, with only the installed directory
headers_alone() {
    bad=0
    for h in "$INC"/*.h; do
        printf '#include <poolscope/%s>\nint main(void){return 0;}\n' "$(basename "$h")" >"$T/hdr.c"
        (cd "$T" && cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$PFX/include" hdr.c) 2>"$T/hdr.err" ||
            { echo "  $(basename "$h") does not compile alone: $(head -3 "$T/hdr.err")" >&2; bad=1; }
    done
    [ $bad -eq 0 ]
}
check installed_headers_self_contained headers_alone

# ... and as strict C11 and as C++, alone and all eight together
CXXS=""
for c in g++ clang++; do command -v $c >/dev/null 2>&1 && CXXS="$CXXS $c"; done
headers_strict() {
    [ -n "$CXXS" ] || { echo "  no C++ compiler (make deps installs g++ and clang)" >&2; return 1; }
    bad=0 all=""
    for h in "$INC"/*.h; do all="$all#include <poolscope/$(basename "$h")>\n"; done
    for h in "$INC"/*.h all; do
        if [ "$h" = all ]; then printf "$all" >"$T/hs.h"; else printf '#include <poolscope/%s>\n' "$(basename "$h")" >"$T/hs.h"; fi
        printf '#include "hs.h"\nint main(void) { return 0; }\n' >"$T/hs.c"
        printf '#include "hs.h"\nint main() { return 0; }\n' >"$T/hs.cpp"
        (cd "$T" && cc -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wpedantic -Werror \
            -fsyntax-only -I"$PFX/include" hs.c) 2>"$T/hs.err" ||
            { echo "  $(basename "$h"): C11: $(grep -m2 'error' "$T/hs.err")" >&2; bad=1; }
        for cxx in $CXXS; do for std in c++11 c++17; do
            (cd "$T" && $cxx -std=$std -Wall -Wextra -Werror -fsyntax-only -I"$PFX/include" hs.cpp) 2>"$T/hs.err" ||
                { echo "  $(basename "$h"): $cxx -std=$std: $(grep -m2 'error' "$T/hs.err")" >&2; bad=1; }
        done; done
    done
    [ $bad -eq 0 ]
}
check installed_headers_strict_c11_and_cxx headers_strict

# ---- a user program built against the installed package only ----
build_client() {
    cp "$ROOT/tests/progs/api_client.c" "$T/api_client.c" &&
        (cd "$T" && cc -std=c11 -O2 -o api_client api_client.c \
            $(pkg-config --cflags --libs poolscope)) 2>"$T/cc.err" ||
        { cat "$T/cc.err" >&2; return 1; }
}
check api_client_builds_with_pkgconfig build_client

# the pool adapter with both packages, as the README shows it
adapter_client() {
    cat >"$T/adapter.c" <<'EOF'
#include <stdio.h>
#include <poolscope/bufpool.h>
#include <poolscope/pool_adapter.h>
int main(void)
{
    int err;
    bp_config_t cfg = bp_config_default();
    cfg = psa_bufpool_config(&cfg);
    bp_pool_t *p = bp_create(&cfg, &err);
    if (!p) return 1;
    bp_destroy(p);
    psa_bufpool_destroyed(&cfg);
    puts("adapter=ok");
    return 0;
}
EOF
    # `poolscope` alone must be enough: it requires the pool library.
    (cd "$T" && cc -std=c11 -o adapter adapter.c $(pkg-config --cflags --libs poolscope)) \
        2>"$T/ad.err" || { head -5 "$T/ad.err" >&2; return 1; }
    [ "$("$T/adapter")" = adapter=ok ]
}
check pool_adapter_links_with_pkgconfig adapter_client

# the pool library needs libpscommon: both packages' link line names it
# after -lpool, and the archive is installed
pc_common() {
    [ -s "$PFX/lib/libpscommon.a" ] || { echo "  \$PREFIX/lib/libpscommon.a missing" >&2; return 1; }
    for m in poolscope-pool "poolscope poolscope-pool"; do
        l=" $(pkg-config --libs $m) "
        case $l in *" -lpool "*"-lpscommon "*) ;; *) echo "  pkg-config --libs $m: $l" >&2; return 1 ;; esac
    done
}
check pkgconfig_links_pscommon pc_common

# ---- a C++ program against the installed package ----
cxx_build() {
    [ -n "$CXXS" ] || { echo "  no C++ compiler" >&2; return 1; }
    cp "$ROOT/tests/cxx/api_link.cpp" "$T/api_link.cpp" || return 1
    for cxx in $CXXS; do for std in c++11 c++17; do
        (cd "$T" && $cxx -std=$std -Wall -Wextra -Werror -o "api_link.$cxx.$std" api_link.cpp \
            $(pkg-config --cflags --libs poolscope poolscope-pool)) 2>"$T/cxx.err" ||
            { echo "  $cxx -std=$std:" >&2; head -20 "$T/cxx.err" >&2; return 1; }
    done; done
    cp "$T/api_link.$(echo $CXXS | cut -d' ' -f1).c++17" "$T/api_link"
}
check cxx_api_link_builds_with_pkgconfig cxx_build

# what api_link prints untraced, line by line
printf '%s\n' api=0 cxx.tensors=4 bufpool.acquires=3 bufpool.hits=1 bufpool.misses=2 \
    blockpool.allocated=3 blockpool.in_use_after_free=0 read.pid=4242 read.events=8 \
    read.malloc=3 read.free=1 read.mark_begin=1 read.complete=1 >"$T/cxx.want"
cxx_runs() {
    for x in "$T"/api_link.*.c++*; do
        [ -x "$x" ] || { echo "  no C++ build to run" >&2; return 1; }
        rm -f "$T/w.pst"
        "$x" "$T/w.pst" >"$T/cxx.out" 2>"$T/cxx.err" || { echo "  $x: exit $?: $(cat "$T/cxx.err")" >&2; return 1; }
        cmp -s "$T/cxx.want" "$T/cxx.out" || { echo "  $x:" >&2; diff "$T/cxx.want" "$T/cxx.out" >&2; return 1; }
    done
}
check cxx_api_link_runs cxx_runs

# under the installed record: the same output but api=1, and the events its
# inline API calls and pool adapters emitted are in the trace
cxx_traced() {
    rm -f "$T/w.pst"
    (cd "$T" && env -u POOLSCOPE_PRELOAD_LIB "$PFX/bin/poolscope" record -o "$T/cxx.pst" -- \
        "$T/api_link" "$T/w.pst") >"$T/cxxr.out" 2>"$T/cxxr.err" || { cat "$T/cxxr.err" >&2; return 1; }
    sed 's/^api=0$/api=1/' "$T/cxx.want" >"$T/cxxr.want"
    cmp -s "$T/cxxr.want" "$T/cxxr.out" || { diff "$T/cxxr.want" "$T/cxxr.out" >&2; return 1; }
    "$DUMP" "$T/cxx.pst" >"$T/cxx.dump" || return 1
    printf '%s\n' complete=1 lost=0 mark.cxx=1 mark.cxx.point=1 mark_end=1 thread_name.cxx-main=1 \
        tensor_acquire=4 tensor_release=4 pool.1.acquires=3 pool.1.hits=1 pool.1.misses=2 \
        pool.1.seq_disorder=0 pool.2.n_allocations=3 pool.2.n_frees=3 pool.2.blocks_in_use=0 >"$T/cxxd.want"
    same_keys "$T/cxxd.want" "$T/cxx.dump"
}
check cxx_api_link_traced_by_installed_record cxx_traced

# ---- the installed record: finds the installed preload, traces the client ----
preload_found() {
    (cd "$T" && env -u POOLSCOPE_PRELOAD_LIB "$PFX/bin/poolscope" record -o "$T/env.pst" -- \
        sh -c 'echo "$LD_PRELOAD"') >"$T/env.out" 2>"$T/env.err" || { cat "$T/env.err" >&2; return 1; }
    want=$(realpath "$PFX/lib/poolscope/libpoolscope-preload.so")
    [ "$(cat "$T/env.out")" = "$want" ] ||
        { echo "  LD_PRELOAD=$(cat "$T/env.out"), want $want" >&2; return 1; }
}
check installed_record_uses_installed_preload preload_found

traced_client() {
    "$T/api_client" 8 >"$T/plain.out" 2>&1 || return 1
    (cd "$T" && env -u POOLSCOPE_PRELOAD_LIB "$PFX/bin/poolscope" record -o "$T/api.pst" -- \
        "$T/api_client" 8) >"$T/traced.out" 2>"$T/traced.err" || { cat "$T/traced.err" >&2; return 1; }
    cmp -s "$T/plain.out" "$T/traced.out" || { echo "  output differs under record" >&2; return 1; }
    "$DUMP" "$T/api.pst" >"$T/api.dump" || return 1
    grep -v '^checksum=' "$T/plain.out" >"$T/api.want"
    [ "$(grep -c . "$T/api.want")" -eq 4 ] && same_keys "$T/api.want" "$T/api.dump" &&
        [ "$(key "$T/api.dump" mark.step)" = 8 ] && [ "$(key "$T/api.dump" tensor_acquire)" = 16 ] &&
        [ "$(key "$T/api.dump" mark_end)" = 9 ] && [ "$(key "$T/api.dump" complete)" = 1 ] &&
        [ "$(key "$T/api.dump" lost)" = 0 ] && [ "$(key "$T/api.dump" malloc)" -ge 16 ]
}
check api_client_traced_by_installed_record traced_client

# the installed reader reads that trace as pstdump does
installed_reader() {
    "$T/api_client" --read "$T/api.pst" >"$T/read.out" || return 1
    [ "$(cat "$T/read.out")" = "events=$(key "$T/api.dump" events) end_seen=1 truncated=0 corrupt=0" ] ||
        { echo "  reader: $(cat "$T/read.out"), pstdump events=$(key "$T/api.dump" events)" >&2; return 1; }
}
check installed_reader_reads_trace installed_reader

# DESTDIR stages under a root but the .pc files name the real prefix
destdir() {
    make --no-print-directory install PREFIX=/opt/ps DESTDIR="$T/stage" BUILD="$BUILD" >"$T/dd.log" 2>&1 ||
        { tail -5 "$T/dd.log" >&2; return 1; }
    [ -x "$T/stage/opt/ps/bin/poolscope" ] &&
        grep -qx 'prefix=/opt/ps' "$T/stage/opt/ps/lib/pkgconfig/poolscope.pc"
}
check install_destdir destdir
exit $status
