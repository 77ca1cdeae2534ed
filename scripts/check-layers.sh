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
