#!/bin/sh
# cxx_names.sh — long C++ names (issue 30, items 4 and 5).
# tests/cxx/names_templates.cpp allocates in a member of a class template
# over std::string and a std::map of std::function. The whole name comes
# from the binary's symbol table demangled by c++filt (binutils), not from
# us: `sql` stores it whole, `report --full` prints it whole, and the text
# report shows it with every template argument list folded to <…> (the
# rule of analyzer/sites.h, az_sv_fold, written again here), so no label
# line holds the long name. The HTML page's data keeps the whole name.
# Item 5: a module without symbols is named once in the report's Symbols
# section and symbol_notes, with the Debian package dpkg -S gives for it
# (PKG-dbgsym) or the build-id path looked in (readelf -n gives the id).
. tests/integration/lib.sh
command -v g++ >/dev/null && command -v c++filt >/dev/null && command -v nm >/dev/null ||
    { echo "ok cxx_names_skipped_no_toolchain"; exit 0; }
g++ -std=c++17 -O1 -g -o "$T/nt" "$ROOT/tests/cxx/names_templates.cpp" || exit 1
"$PS" record -o "$T/nt.pst" -- "$T/nt" >/dev/null 2>&1 || { check record false; exit $status; }
nm "$T/nt" | awk '$3 ~ /make_all/ {print $3}' | head -1 | c++filt >"$T/full.txt"
full=$(cat "$T/full.txt")
"$PS" report "$T/nt.pst" >"$T/r.txt" 2>"$T/r.err"
"$PS" report "$T/nt.pst" --full >"$T/rf.txt" 2>/dev/null
"$PS" sql "$T/nt.pst" -o "$T/nt.db" >/dev/null 2>&1
fold() {
    python3 - "$1" <<'PY'
import sys
s, o, d, i, par = sys.argv[1], '', 0, 0, 0
while i < len(s):
    if d and s[i] in '()':
        par = par + 1 if s[i] == '(' else max(par - 1, 0); i += 1; continue
    if par and s[i] in '<>':
        i += 1; continue
    if s.startswith('operator', i) and (i == 0 or s[i - 1] in ': ~'):
        k = i + 8
        while k < len(s) and s[k] in '<>=-': k += 1
        if not d: o += s[i:k]
        i = k; continue
    c = s[i]
    if c == '<' and not d and s[i - 1:i] == ' ' and s[i + 1:i + 2] == ' ': o += c
    elif c == '<' and not d and not (i > 0 and (s[i - 1].isalnum() or s[i - 1] == '_')): o += c
    elif c == '<':
        if not d: o += '<\u2026'
        d += 1
    elif c == '>' and d:
        d -= 1
        if not d: o += '>'
    elif not d: o += c
    i += 1
print(o)
PY
}
short=$(fold "$full")
names() {
    case $full in *'std::map<'*'std::function<int (double)>'*'>::make_all('*) ;;
        *) echo "  c++filt gave: $full" >&2; return 1 ;; esac
    [ "${#full}" -gt 300 ] || { echo "  not a long name: $full" >&2; return 1; }
    [ "$short" = 'eng::Registry<…>::make_all(std::__cxx11::basic_string<…> const&, int)' ] ||
        { echo "  folded: $short" >&2; return 1; }
}
check cxxfilt_name_is_long names
text_folded() {
    grep -qF "$short (names_templates.cpp:" "$T/r.txt" || { grep make_all "$T/r.txt" >&2; return 1; }
    ! grep -qF "$full" "$T/r.txt" || { echo "  the whole name is in the text report" >&2; return 1; }
    # no site line of the report is longer than the folded name allows
    awk 'length($0) > 400 { print "  long line: " length($0); bad = 1 } END { exit bad }' "$T/r.txt" >&2
}
check report_folds_template_arguments text_folded
full_whole() {
    grep -qF "$full (names_templates.cpp:" "$T/rf.txt" || { grep -c make_all "$T/rf.txt" >&2; return 1; }
}
check report_full_shows_whole_name full_whole
sql_whole() {
    n=$(python3 - "$T/nt.db" "$full" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(db.execute("SELECT count(*) FROM frames WHERE function = ?", (sys.argv[2],)).fetchone()[0])
PY
)
    [ "$n" -ge 1 ] || { echo "  no frames row named the whole name" >&2; return 1; }
}
check sql_keeps_whole_name sql_whole
json_whole() {
    "$PS" report "$T/nt.pst" --json >"$T/r.json" 2>/dev/null &&
        grep -qF "$(printf '%s' "$full" | sed 's/\\/\\\\/g; s/"/\\"/g')" "$T/r.json"
}
check json_keeps_whole_name json_whole
html_whole() {
    "$PS" html "$T/nt.pst" -o "$T/nt.html" >/dev/null 2>&1 && grep -q 'foldName' "$T/nt.html" &&
        python3 - "$T/nt.html" "$full" <<'PY'
import json, re, sys
page, full = open(sys.argv[1]).read(), sys.argv[2]
data = json.loads(re.search(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S).group(1))
strs = []
def walk(v):
    if isinstance(v, str): strs.append(v)
    elif isinstance(v, dict): [walk(x) for x in v.values()]
    elif isinstance(v, list): [walk(x) for x in v]
walk(data)
assert any(full in x for x in strs), 'the whole name is not in the page data'
PY
}
check html_data_keeps_whole_name_and_folds_it html_whole
# in the browser (the driver html.sh installs into $BUILD/browser)
if [ -d "$B/browser/node_modules/playwright-core" ] && command -v node >/dev/null; then
    mkdir -p "$B/html-shots"
    BROWSER_DEPS=$B/browser node "$ROOT/tests/browser/names_check.js" "$T/nt.html" "$full" "$short" \
        "$B/html-shots/cxx-names.png" >"$T/browser.out" 2>&1
    cat "$T/browser.out"
    grep -q '^not ok' "$T/browser.out" && status=1
else
    echo "  (no browser driver in $B/browser: html.sh installs it; the page's names not checked in a browser)" >&2
fi

# ---- item 5: a module without symbols -------------------------------------
# a stripped program (no symbol names at all for its own functions)
cat >"$T/strip.c" <<'C'
#include <stdlib.h>
#include <string.h>
static void *volatile keep;
__attribute__((noinline)) static void *make(size_t n) { void *p = malloc(n); if (p) memset(p, 0, n); return p; }
int main(void) { for (int i = 0; i < 4; i++) { keep = make(1000 + (size_t)i); free(keep); } keep = make(64); return 0; }
C
cc -O1 -Wl,--build-id -o "$T/stripped" "$T/strip.c" && strip --strip-all "$T/stripped" || exit 1
bid=$(readelf -n "$T/stripped" | sed -n 's/.*Build ID: //p')
"$PS" record -o "$T/s.pst" -- "$T/stripped" >/dev/null 2>&1
nosym_buildid() {
    "$PS" report "$T/s.pst" >"$T/s.txt" 2>"$T/s.err" && "$PS" report "$T/s.pst" --json >"$T/s.json" 2>/dev/null || return 1
    want="/usr/lib/debug/.build-id/$(echo "$bid" | cut -c1-2)/$(echo "$bid" | cut -c3-).debug"
    sed -n '/^Symbols$/,$p' "$T/s.txt" | grep -F "$T/stripped has no symbols" | grep -qF "$want" ||
        { echo "  want $want in:" >&2; sed -n '/^Symbols$/,$p' "$T/s.txt" >&2; return 1; }
    [ "$(grep -c "$T/stripped has no symbols" "$T/s.txt")" = 1 ] || { echo "  said more than once:" >&2; cat "$T/s.txt" >&2; return 1; }
    ! grep -q 'has no symbols' "$T/s.err" || { echo "  on stderr (advice goes in the report):" >&2; cat "$T/s.err" >&2; return 1; }
    python3 - "$T/s.json" "$T/stripped" "$want" <<'PY'
import json, sys
notes = [n for n in json.load(open(sys.argv[1]))['symbol_notes'] if sys.argv[2] + ' has no symbols' in n]
assert len(notes) == 1 and sys.argv[3] in notes[0], notes
PY
}
check nosym_note_names_build_id_path nosym_buildid
# a packaged library without symbols, when dpkg and such a library are
# here: libstdc++ (Debian ships it stripped; its symbols are libstdc++6-dbgsym)
nosym_dpkg() {
    command -v dpkg >/dev/null || { echo "  (no dpkg: skipped)" >&2; return 0; }
    # whether libstdc++'s frames have names here, from the --full stacks
    grep -q 'libstdc++\.so[^ ]*+0x' "$T/rf.txt" || { echo "  (libstdc++ has symbols here: skipped)" >&2; return 0; }
    lib=$(ldd "$T/nt" | awk '/libstdc\+\+/ {print $3}' | head -1)
    pkg=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1)
    [ -n "$pkg" ] || pkg=$(dpkg -S "$(realpath "$lib")" 2>/dev/null | head -1 | cut -d: -f1)
    [ -n "$pkg" ] || { echo "  dpkg owns no $lib" >&2; return 1; }
    sed -n '/^Symbols$/,$p' "$T/r.txt" | grep -F "$(basename "$lib") has no symbols" | grep -qF "install $pkg-dbgsym" ||
        { echo "  want a note on $lib naming $pkg-dbgsym:" >&2; sed -n '/^Symbols$/,$p' "$T/r.txt" >&2; return 1; }
}
check nosym_note_names_debian_package nosym_dpkg
# Two stripped modules (a program and its library), each owned by a
# package of a stand-in dpkg that logs its runs: every module's owner comes
# from one run of dpkg (each run reads dpkg's whole database: 0.6 s here,
# and a PyTorch trace has 77 modules without symbols), and each note names
# the package the stand-in gave for that module's own file.
# (the library exports nothing, so no dynamic symbol names its frames
# either: it allocates from its constructor)
cat >"$T/libs2.c" <<'C'
#include <stdlib.h>
#include <string.h>
static void *volatile kept;
__attribute__((noinline)) static void *s2_make(size_t n) { void *p = malloc(n); if (p) memset(p, 1, n); return p; }
__attribute__((constructor)) static void s2_init(void) { for (int i = 0; i < 3; i++) { kept = s2_make(300 + (size_t)i); free(kept); } }
C
cat >"$T/uses2.c" <<'C'
#include <stdlib.h>
#include <string.h>
static void *volatile keep;
__attribute__((noinline)) static void *twice(size_t n) { void *p = malloc(n * 2); if (p) memset(p, 0, n); return p; }
int main(void) { for (int i = 0; i < 4; i++) { keep = twice(500 + (size_t)i); free(keep); } keep = twice(32); return 0; }
C
mkdir -p "$T/s2" "$T/fakebin"
cc -O1 -fPIC -shared -fvisibility=hidden -o "$T/s2/libs2.so" "$T/libs2.c" && strip --strip-all "$T/s2/libs2.so" &&
    cc -O1 -o "$T/s2/uses2" "$T/uses2.c" -Wl,--no-as-needed -L"$T/s2" -ls2 -Wl,-rpath,"$T/s2" && strip --strip-all "$T/s2/uses2" || exit 1
cat >"$T/fakebin/dpkg" <<SH
#!/bin/sh
# stand-in: logs each run, owns every file under $T/s2 as pkg-<file name>
echo "\$*" >>"$T/dpkg.log"
[ "\$1" = -S ] || exit 2
shift; found=1
for f in "\$@"; do
    case \$f in $T/s2/*) b=\$(basename "\$f" | tr -c 'a-z0-9\n' -); echo "pkg-\$b: \$f"; found=0 ;; esac
done
exit \$found
SH
chmod +x "$T/fakebin/dpkg"
"$PS" record -o "$T/s2.pst" -- "$T/s2/uses2" >/dev/null 2>&1
one_dpkg() {
    rm -f "$T/dpkg.log"
    PATH="$T/fakebin:$PATH" "$PS" report "$T/s2.pst" >"$T/s2.txt" 2>"$T/s2.err" || return 1
    sed -n '/^Symbols$/,$p' "$T/s2.txt" >"$T/s2.sym"
    grep -F "libs2.so has no symbols" "$T/s2.sym" | grep -qF "install pkg-libs2-so-dbgsym" &&
        grep -F "uses2 has no symbols" "$T/s2.sym" | grep -qF "install pkg-uses2-dbgsym" ||
        { echo "  want each module's own package in:" >&2; cat "$T/s2.sym" >&2; return 1; }
    [ "$(wc -l <"$T/dpkg.log")" = 1 ] || { echo "  dpkg ran $(wc -l <"$T/dpkg.log") times, want 1:" >&2; cat "$T/dpkg.log" >&2; return 1; }
}
check nosym_owners_from_one_dpkg_run one_dpkg
exit $status
