#!/bin/sh
# check-layers.sh — every `#include "…"` (and `#include <poolscope/…>`) of
# the tree against the layer table of README.md ("Architecture", between
# the layers:begin and layers:end markers). That table is the one statement
# of the graph; this script only reads it.
#
#   sh scripts/check-layers.sh [TREE]     TREE defaults to this script's tree
#
# A source file belongs to the longest folder of the table that holds it; a
# public header (include/poolscope/NAME.h) to the folder the table names
# as its owner. An include is resolved as the compiler would: next to the
# including file first, then in the folders of the tree. It is allowed when
# its target belongs to the same folder, to a folder the row lists, or is a
# public header the row names; a row saying "everything" allows anything.
#
# Exit 0 when every include is allowed (one summary line); 1 with one line
# "FILE:LINE: ..." per include that goes up the graph (or cannot be found);
# 2 when the table is missing or a file is in no folder of it.
set -u
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2
[ -f README.md ] || { echo "check-layers: $ROOT/README.md: not found" >&2; exit 2; }
list=$(mktemp) || exit 2
trap 'rm -f "$list"' EXIT
# build/ and its variants (build/asan, a build-foo) hold no sources
find . \( -path ./.git -o -path './build*' \) -prune -o -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' \) -print |
    sed 's|^\./||' | LC_ALL=C sort >"$list"
[ -s "$list" ] || { echo "check-layers: $ROOT: no C sources" >&2; exit 2; }

if grep -q '[[:space:]]' "$list"; then
    echo "check-layers: file names with blanks are not supported: $(grep -m1 '[[:space:]]' "$list")" >&2
    exit 2
fi

LC_ALL=C awk '
function fail2(msg) { print "check-layers: " msg > "/dev/stderr"; bad2 = 1 }
# the `backticked` words of a table cell
function ticks(cell, out,    n, s) {
    n = 0
    while (match(cell, /`[^`]+`/)) {
        s = substr(cell, RSTART + 1, RLENGTH - 2)
        gsub(/^[ \t]+|[ \t]+$/, "", s)
        out[++n] = s
        cell = substr(cell, RSTART + RLENGTH)
    }
    return n
}
# a/b/../c -> a/c, ./a -> a
function norm(p,    n, part, out, i, k) {
    n = split(p, part, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (part[i] == "" || part[i] == ".") continue
        if (part[i] == "..") { if (k > 0) k--; else out[++k] = ".."; continue }
        out[++k] = part[i]
    }
    p = ""
    for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
    return p
}
function dirname(p) { return sub(/\/[^\/]*$/, "", p) ? p : "." }
function basename(p) { sub(/.*\//, "", p); return p }
function is_public(p) { return p ~ /^include\/poolscope\/[^\/]+$/ }
# the folder of the table a file belongs to, "" if none
function comp_of(p,    f, best) {
    if (is_public(p)) return (basename(p) in owner) ? owner[basename(p)] : ""
    best = ""
    for (f in folder)
        if (index(p, f) == 1 && length(f) > length(best)) best = f
    return best
}
function allowed(c, t, tc) {
    return (c in everything) || tc == c || ((c, tc) in allow) ||
           (is_public(t) && ((c, basename(t)) in allow_hdr))
}
function may(c,    s, k, i) {
    if (c in everything) return "everything"
    s = ""
    for (i = 1; i <= nrule[c]; i++) s = s " " rule[c, i]
    return s == "" ? " its own headers only" : s
}

# ---- 1: README.md, the layer table ----
FILENAME == "README.md" {
    if ($0 ~ /<!-- layers:begin/) { inblk = 1; seen = 1; next }
    if ($0 ~ /<!-- layers:end/) { inblk = 0; next }
    if (!inblk || $0 !~ /^\|/) next
    split($0, cell, "|")
    nl = ticks(cell[2], L)
    if (nl == 0) next                          # heading or separator row
    nr = ticks(cell[3], R)
    if (L[1] ~ /\.h$/) {                       # public header -> owner
        for (i = 1; i <= nl; i++) owner[L[i]] = R[1]
        next
    }
    for (i = 1; i <= nl; i++) {                # folder -> what it may include
        f = L[i]; folder[f] = 1
        if (cell[3] ~ /everything/) everything[f] = 1
        for (j = 1; j <= nr; j++) {
            if (R[j] ~ /\.h$/) allow_hdr[f, R[j]] = 1; else allow[f, R[j]] = 1
            rule[f, ++nrule[f]] = R[j]
        }
    }
    next
}
# ---- 2: the list of files in the tree ----
FILENAME == LIST { exists[$0] = 1; files[++nfiles] = $0; next }

END {
    if (!seen) { fail2("README.md has no layer table (<!-- layers:begin --> ... <!-- layers:end -->)"); exit 2 }
    for (h in owner) if (!((owner[h]) in folder)) fail2("README.md: owner " owner[h] " of " h " is not a folder of the table")
    for (k = 1; k <= nfiles; k++) {
        p = files[k]; c = comp_of(p)
        if (c == "") {
            if (is_public(p)) fail2(p ": public header with no owner in the layer table of README.md")
            else fail2(p ": in no folder of the layer table of README.md")
            continue
        }
        d = dirname(p); ln = 0
        while ((getline line < p) > 0) {
            ln++
            if (line !~ /^[ \t]*#[ \t]*include[ \t]*("|<poolscope\/)/) continue
            x = line
            sub(/^[ \t]*#[ \t]*include[ \t]*["<]/, "", x); sub(/[">].*$/, "", x)
            nincl++
            # resolve: "poolscope/NAME" is a public header; else next to the
            # file; else in any folder of the tree (first one allowed, if any)
            t = ""
            if (x ~ /^poolscope\//) t = norm("include/" x)
            else if (norm(d "/" x) in exists) t = norm(d "/" x)
            else {
                for (f in folder) if (norm(f "/" x) in exists) {
                    cand = norm(f "/" x)
                    if (t == "" || (allowed(c, cand, comp_of(cand)) && !allowed(c, t, comp_of(t)))) t = cand
                }
                if (t == "" && (norm("include/poolscope/" x) in exists)) t = norm("include/poolscope/" x)
            }
            if (!(t in exists)) {
                printf "%s:%d: #include \"%s\": no such file in the tree\n", p, ln, x
                nbad++; continue
            }
            tc = comp_of(t)
            if (tc == "") continue                   # reported above for that file
            if (!allowed(c, t, tc)) {
                printf "%s:%d: #include \"%s\" is %s of %s, which %s may not include (%s may include:%s)\n",
                    p, ln, x, t, tc, c, c, may(c)
                nbad++
            }
        }
        close(p)
    }
    if (bad2) exit 2
    if (nbad) {
        printf "check-layers: %d include(s) against the layer graph (README.md, Architecture)\n", nbad
        exit 1
    }
    printf "check-layers: %d includes in %d files follow the layer graph\n", nincl, nfiles
}
' LIST="$list" README.md "$list"
rc=$?
[ $rc -eq 2 ] && exit 2

# ---- the order of stages inside a component -------------------------------------
# Two components are cut into stages that call one way only: the reader
# (libtrace/, docs/DESIGN.md "Reading a trace") and the interposer
# (libtrace/preload/). Each list below is that order, one stage per line,
# the first line the lowest. A stage's files may include the headers of
# their own stage and of lower ones; and, read from the object files with
# nm (each .c compiled at -O0 into a temporary folder), no function of a
# stage's file calls a function defined in a higher stage's file, but for
# the calls listed as allowed. Only functions count: the interposer's
# globals (ps_g, ps_tls, ps_real: preload.h) are its state, not a stage.
#
# Exit 1 with one line per include ("FILE:LINE: ...") or call ("FILE: calls
# ...") that goes up; 2 when a file of the component is in no stage or
# does not compile. CHECK_LAYERS_STAGES names the components whose stages
# are checked (default "reader interposer"; empty: none, for tests of the
# include graph alone, which would otherwise compile them each time).

# The reader: chunks -> decode -> the merge's tables -> versions -> merge
# (pst_next) -> the lifecycle. rd_types.h is the types every stage shares.
READER_DIR=libtrace
READER_FILES='reader.c rd_*.c rd_*.h'
READER_ORDER='rd_types.h
rd_chunk.c rd_chunk.h
rd_decode.c rd_decode.h
rd_tables.c rd_tables.h
rd_version.c rd_version.h
rd_merge.c rd_merge.h
reader.c rd_internal.h'
# files named rd_ that are no stage: they use the public API only, and may
# include no stage's header
READER_OUTSIDE='rd_end.c rd_inflate.c rd_live.c rd_recover.c'
READER_ALLOWED=''

# The interposer: system calls and the clock at the bottom, what writes the
# file, the rings and the counters, stacks and the thread registry, the
# file's life (name, end, flusher, fork), the hooks, then attach and init,
# which start everything. preload.h declares every cross-file function
# (its headers are the lowest stage).
PRELOAD_DIR=libtrace/preload
PRELOAD_FILES='*.c *.h'
PRELOAD_ORDER='preload.h enc_inline.h py311.h
sys.c
clock.c
compress.c
writer.c
ctl.c
ring.c
cfi.c
got.c
stacks.c
threads.c
python.c
tracefile.c
end.c
flusher.c
fork.c
hooks_signal.c
hooks_func.c
hooks_alloc.c
hooks_proc.c
attach.c
init.c'
PRELOAD_OUTSIDE=''
# Calls that go up today, each one a cycle between two concerns: CALLER
# SYMBOL, why. A call not listed here that goes up fails the check.
PRELOAD_ALLOWED='stacks.c ps_py_on          Python frames are spliced into the stacks captured,
stacks.c ps_py_reset       and python.c records its events with their stack ids
stacks.c ps_py_splice
stacks.c ps_py_watch_check
threads.c ps_init          a hooked call before the constructor starts the library
threads.c ps_ensure_child  a fork child opens its own file at its first event,
end.c ps_ensure_child      or at its end
tracefile.c ps_fn_header   the header names the scope functions
end.c ps_write_sync_locked the last SYNC before END is the flusher'"'"'s
flusher.c ps_att_poll      the flusher ends an attach window
flusher.c ps_att_restore
flusher.c ps_fn_poll       the flusher installs scope-function stubs in objects loaded later
flusher.c pthread_create   the flusher'"'"'s thread is started through the library'"'"'s own hook
fork.c ps_note_untraced    a child that cannot be traced is counted by hooks_proc.c
fork.c ps_common_open      a fork child opens its file as init does
hooks_alloc.c ps_proc_resolve  the process family is resolved with the allocator
attach.c ps_core_ctl_dir   attach'"'"'s late start reuses init'"'"'s pieces
attach.c ps_core_open
attach.c ps_core_self
attach.c ps_core_key
attach.c ps_recompute_on   the globals'"'"' derived flags (ps_g.on, fast...), recomputed
end.c ps_recompute_on      wherever the state they derive from changes
flusher.c ps_recompute_on
fork.c ps_recompute_on
hooks_proc.c ps_recompute_on'

objdir=$(mktemp -d) || exit 2
trap 'rm -f "$list"; rm -rf "$objdir"' EXIT

# stages NAME DIR FILES ORDER OUTSIDE ALLOWED: prints the report, returns
# 0, 1 or 2 as the script exits
stages() {
    name=$1 dir=$2 files=$3 order=$4 outside=$5 allowed=$6
    # every file of the component is in a stage or outside
    for f in $(cd "$dir" && eval "ls -d $files" 2>/dev/null); do
        if ! printf '%s\n%s\n' "$order" "$outside" | tr ' ' '\n' | grep -qx "$f"; then
            echo "check-layers: $dir/$f: in no stage of the $name's order (scripts/check-layers.sh)" >&2
            return 2
        fi
    done
    printf '%s\n' "$order" | tr ' ' '\n' | while read -r f; do
        [ -f "$dir/$f" ] || { echo "check-layers: $dir/$f: a stage of the $name's order, not in the tree" >&2; exit 2; }
    done || return 2
    # objects of the stages' .c files, and their symbols: "FILE U SYM", "FILE T SYM"
    : >"$objdir/$name.sym"
    for f in $(printf '%s\n' "$order" | tr ' ' '\n' | grep '\.c$'); do
        o="$objdir/$name-${f%.c}.o"
        if ! ${CC:-cc} -std=c11 -D_GNU_SOURCE -O0 -w -Iinclude -Icommon -Ipool -Ilibtrace \
                -c "$dir/$f" -o "$o" 2>"$objdir/cc.err"; then
            echo "check-layers: $dir/$f does not compile, so its calls cannot be read:" >&2
            head -5 "$objdir/cc.err" >&2
            return 2
        fi
        nm "$o" | awk -v f="$f" '$1 == "U" { print f, "U", $2 } $2 == "T" { print f, "T", $3 }' >>"$objdir/$name.sym"
    done
    printf '%s\n' "$order" >"$objdir/$name.order"
    printf '%s\n' "$outside" >"$objdir/$name.outside"
    printf '%s\n' "$allowed" >"$objdir/$name.allowed"
    (cd "$dir" && LC_ALL=C awk -v name="$name" -v dir="$dir" '
    FILENAME ~ /\.order$/ { for (i = 1; i <= NF; i++) lvl[$i] = FNR; stage[FNR] = $1; sub(/\.[ch]$/, "", stage[FNR]); nst = FNR; next }
    FILENAME ~ /\.outside$/ { for (i = 1; i <= NF; i++) out[$i] = 1; next }
    FILENAME ~ /\.allowed$/ { if (NF >= 2) { ok[$1, $2] = 1; nok++ } next }
    $2 == "T" { def[$3] = $1; next }
    { use[++nuse] = $1 SUBSEP $3 }
    END {
        for (f in lvl) files[f] = 1
        for (f in out) files[f] = 1
        for (f in files) {
            ln = 0
            while ((getline line < f) > 0) {
                ln++
                if (line !~ /^[ \t]*#[ \t]*include[ \t]*"/) continue
                x = line; sub(/^[^"]*"/, "", x); sub(/".*$/, "", x)
                if (!(x in lvl)) continue
                nincl++
                if (f in out) {
                    printf "%s/%s:%d: #include \"%s\": %s is no stage of the %s, which may use its public API only\n", dir, f, ln, x, f, name
                    nbad++
                } else if (lvl[x] > lvl[f]) {
                    printf "%s/%s:%d: #include \"%s\" is of a later stage (%s) than the file (%s) in the order of the %s\n", dir, f, ln, x, stage[lvl[x]], stage[lvl[f]], name
                    nbad++
                }
            }
            close(f)
        }
        for (k = 1; k <= nuse; k++) {
            split(use[k], u, SUBSEP); f = u[1]; sym = u[2]
            if (!(sym in def) || def[sym] == f) continue
            ncall++
            if (lvl[def[sym]] <= lvl[f]) continue
            if ((f, sym) in ok) { nallowed++; seen[f, sym] = 1; continue }
            printf "%s/%s: calls %s (%s/%s), of a later stage (%s) than the file (%s) in the order of the %s\n", dir, f, sym, dir, def[sym], stage[lvl[def[sym]]], stage[lvl[f]], name
            nbad++
        }
        for (k in ok) if (!(k in seen)) {
            split(k, a, SUBSEP)
            printf "check-layers: %s: %s no longer calls %s: its allowance can go\n", name, a[1], a[2] > "/dev/stderr"
        }
        if (nbad) {
            printf "check-layers: %d include(s) or call(s) against the order of the %s stages (scripts/check-layers.sh)\n", nbad, name
            exit 1
        }
        printf "check-layers: %s: %d stages; %d includes and %d calls between files follow their order", name, nst, nincl, ncall
        if (nallowed) printf " (%d going up are allowed, listed in scripts/check-layers.sh)", nallowed
        printf "\n"
    }' "$objdir/$name.order" "$objdir/$name.outside" "$objdir/$name.allowed" "$objdir/$name.sym")
}

for c in ${CHECK_LAYERS_STAGES-reader interposer}; do
    case $c in
    reader) stages reader "$READER_DIR" "$READER_FILES" "$READER_ORDER" "$READER_OUTSIDE" "$READER_ALLOWED"; x=$? ;;
    interposer) stages interposer "$PRELOAD_DIR" "$PRELOAD_FILES" "$PRELOAD_ORDER" "$PRELOAD_OUTSIDE" "$PRELOAD_ALLOWED"; x=$? ;;
    *) echo "check-layers: CHECK_LAYERS_STAGES: no component $c (reader, interposer)" >&2; x=2 ;;
    esac
    [ "$x" -gt "$rc" ] && rc=$x
done
exit $rc
