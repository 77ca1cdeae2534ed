#!/bin/sh
# symbols_buildid.sh — a module is symbolized only from the build the trace
# recorded (issue 27, item 3): a program rebuilt at the same path after
# recording is not named from the new file (its frames show as
# module+0xOFFSET [binary changed], one message on stderr per module);
# --binary PATH=FILE names a saved copy of the recorded build, checked
# against addr2line on that copy; --debug-dir DIR supplies the DWARF of a
# stripped binary from DIR/.build-id/xx/yyyy.debug, and the recorded build's
# debug file when the file on disk is another build; a module recorded
# without a build-id is refused when its file was modified after it was
# loaded. Expected names and lines come from addr2line, never from poolscope.
. tests/integration/lib.sh
cd "$T" || exit 1
command -v gcc >/dev/null && command -v addr2line >/dev/null && command -v objcopy >/dev/null ||
    { echo "ok symbols_buildid_skipped_no_toolchain"; exit 0; }

cat >v1.c <<'EOF'
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static char *load_weights(size_t n)
{
    char *p = malloc(n);
    if (p) p[0] = 1;
    return p;
}
int main(void)
{
    char *w = load_weights(1 << 20);
    printf("%d\n", w[0]);
    free(w);
    return 0;
}
EOF
# another program: same function name at other lines, and other functions
cat >v2.c <<'EOF'
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static char *build_graph(size_t n) { char *q = calloc(1, n); return q; }

/* padding so every line differs from v1.c */

__attribute__((noinline)) static char *load_weights(size_t n)
{
    char *p = build_graph(n);
    return p;
}
int main(void)
{
    char *w = load_weights(1 << 20);
    printf("%d\n", w[0]);
    free(w);
    return 0;
}
EOF

# every frame of module MOD in DB's frames table against addr2line -f -C -i
# on FILE at the recorded address minus one (the recorded frames are return
# addresses); prints how many were compared, fails on any difference or none
a2l_check() { # DB MOD FILE
    python3 - "$@" <<'PY'
import os, subprocess, sqlite3, sys
db, mod, path = sys.argv[1:4]
con = sqlite3.connect(db)
base = [b for p, b in con.execute("select path, base from modules") if os.path.basename(p) == mod]
assert len(set(base)) == 1, base
base = base[0]
rows = con.execute("select stack_id, frame, level, pc, function, file, line from frames "
                   "where module = ? order by stack_id, level", (mod,)).fetchall()
chains = {}
for sid, fr, lvl, pc, fn, fi, ln in rows:
    chains.setdefault((sid, fr, pc), []).append((fn, os.path.basename(fi) if fi else None, ln or 0))
vaddr = min(int(l.split()[2], 16) for l in subprocess.run(['readelf', '-lW', path], capture_output=True,
            text=True).stdout.splitlines() if l.split()[:1] == ['LOAD'])
bad = 0
for (sid, fr, pc), got in chains.items():
    out = subprocess.run(['addr2line', '-f', '-C', '-i', '-e', path, '0x%x' % (pc - 1 - base + vaddr)],
                         capture_output=True, text=True).stdout.splitlines()
    want = []
    for i in range(0, len(out) - 1, 2):
        f, _, l = out[i + 1].split(' ')[0].rpartition(':')
        f = None if f in ('', '??') else os.path.basename(f)
        want.append((None if out[i] == '??' else out[i], f, int(l) if l.isdigit() else 0))
    if got != want:
        bad += 1
        print('  %s+0x%x: poolscope %s, addr2line %s' % (mod, pc - base, got, want), file=sys.stderr)
print('  %d frames of %s compared with addr2line -e %s, %d differ' % (len(rows), mod, os.path.basename(path), bad),
      file=sys.stderr)
sys.exit(1 if bad or not rows else 0)
PY
}

# ---- a program rebuilt at the recorded path ----
gcc -O1 -g -o app v1.c && cp app v1copy || exit 1
"$PS" record -o t.pst -- ./app >/dev/null 2>&1
gcc -O1 -g -o app v2.c || exit 1
"$PS" report t.pst >r.txt 2>e.txt
"$PS" report t.pst --json >r.json 2>e-json.txt
rebuilt_not_named() {
    ! grep -E 'v2\.c|build_graph|load_weights' r.txt r.json || { echo "  the rebuilt file named the trace" >&2; return 1; }
    grep -q 'app+0x[0-9a-f]* \[binary changed\]' r.txt && grep -q 'app+0x[0-9a-f]* \[binary changed\]' r.json ||
        { cat r.txt >&2; return 1; }
}
check rebuilt_binary_not_used_and_marked_in_report rebuilt_not_named
said_once() {
    [ "$(grep -c "app is not the build the trace recorded (its build-id is [0-9a-f]*, the trace's [0-9a-f]*)" e.txt)" = 1 ] &&
        [ "$(grep -c 'not the build' e.txt)" = 1 ] && grep -q -- '--binary .*/app=FILE' e.txt ||
        { echo "  stderr:" >&2; cat e.txt >&2; return 1; }
}
check mismatch_said_once_on_stderr said_once
said_in_report() {
    sed -n '/^Symbols$/,$p' r.txt | grep -q "app is not the build the trace recorded" &&
        python3 -c 'import json, sys; n = json.load(open(sys.argv[1]))["symbol_notes"]
sys.exit(not (len(n) == 1 and "app is not the build the trace recorded" in n[0]))' r.json ||
        { echo "  no note in the report's Symbols section or symbol_notes" >&2; return 1; }
}
check mismatch_said_in_report said_in_report
binary_copy() {
    "$PS" report t.pst --binary "$T/app=$T/v1copy" >rb.txt 2>eb.txt &&
        "$PS" sql t.pst --binary "app=$T/v1copy" -o b.db >/dev/null 2>>eb.txt || return 1
    ! grep -q 'not the build\|binary changed' eb.txt rb.txt || { cat eb.txt >&2; return 1; }
    # the site as addr2line names it on the saved copy
    addr=$(python3 -c "
import sqlite3; c = sqlite3.connect('b.db')
base = [b for p, b in c.execute('select path, base from modules') if p.endswith('/app')][0]
pc = c.execute(\"select pc from frames where function = 'load_weights' limit 1\").fetchone()[0]
print(hex(pc - 1 - base))")
    want=$(addr2line -f -C -e v1copy "$addr" | tr '\n' ' ' | sed 's/ (discriminator [0-9]*)//' |
           awk '{ n = split($2, a, "/"); print $1 " (" a[n] ")" }')
    case $want in "load_weights (v1.c:"*) ;; *) echo "  addr2line says '$want'" >&2; return 1 ;; esac
    grep -qF "$want < main" rb.txt || { echo "  want '$want < main' in:" >&2; grep 'MiB' rb.txt >&2; return 1; }
    a2l_check b.db app v1copy
}
check binary_names_recorded_build_as_addr2line binary_copy
binary_wrong() {
    cp app v2copy
    "$PS" report t.pst --binary "app=$T/v2copy" >rw.txt 2>ew.txt || return 1
    grep -q -- "--binary $T/v2copy: not used for $T/app: its build-id is" ew.txt &&
        grep -q 'binary changed' rw.txt && ! grep -q 'v2\.c' rw.txt || { cat ew.txt >&2; return 1; }
}
check binary_of_another_build_refused binary_wrong
bad_spec() {
    "$PS" report t.pst --binary nothing >/dev/null 2>es.txt; [ $? = 2 ] && grep -q -- '--binary: needs PATH=FILE' es.txt
}
check binary_without_equals_is_usage_error bad_spec

# ---- debug files by build-id ----
gcc -O1 -g -o sapp v1.c || exit 1
bid=$(readelf -n sapp | sed -n 's/.*Build ID: //p')
mkdir -p "dbg/.build-id/$(echo "$bid" | cut -c1-2)"
dfile="dbg/.build-id/$(echo "$bid" | cut -c1-2)/$(echo "$bid" | cut -c3-).debug"
objcopy --only-keep-debug sapp "$dfile" && strip -s sapp || exit 1
"$PS" record -o s.pst -- ./sapp >/dev/null 2>&1
debug_dir() {
    "$PS" report s.pst >s0.txt 2>&1 && ! grep -q load_weights s0.txt || { echo "  stripped, yet named" >&2; return 1; }
    "$PS" report s.pst --debug-dir dbg >s1.txt 2>se.txt && "$PS" sql s.pst --debug-dir "$T/dbg" -o s.db >/dev/null || return 1
    grep -q 'load_weights (v1.c:[0-9]*) < main' s1.txt && ! [ -s se.txt ] || { cat s1.txt se.txt >&2; return 1; }
    a2l_check s.db sapp "$dfile"
}
check debug_dir_build_id_layout_for_stripped_binary debug_dir
debug_dir_rebuilt() {
    gcc -O1 -g -o sapp v2.c || return 1
    "$PS" report s.pst --debug-dir dbg >s2.txt 2>se2.txt || return 1
    grep -q 'load_weights (v1.c:[0-9]*) < main' s2.txt && ! grep -q 'v2\.c\|build_graph' s2.txt && ! [ -s se2.txt ] ||
        { cat s2.txt se2.txt >&2; return 1; }
}
check debug_dir_serves_recorded_build_when_file_rebuilt debug_dir_rebuilt

# ---- no build-id recorded: size and mtime ----
no_build_id() {
    gcc -O1 -g -Wl,--build-id=none -o nb v1.c && cp -p nb nbcopy || return 1
    "$PS" record -o n.pst -- ./nb >/dev/null 2>&1
    "$PS" report n.pst >n0.txt 2>ne0.txt && grep -q 'load_weights (v1.c:[0-9]*) < main' n0.txt && ! [ -s ne0.txt ] ||
        { echo "  unchanged file not used" >&2; cat n0.txt ne0.txt >&2; return 1; }
    gcc -O1 -g -Wl,--build-id=none -o nb v2.c || return 1
    "$PS" report n.pst >n1.txt 2>ne1.txt || return 1
    grep -q 'nb is not the build the trace recorded (no build-id recorded; ' ne1.txt &&
        ! grep -q 'v2\.c\|build_graph\|load_weights' n1.txt && grep -q 'binary changed' n1.txt ||
        { cat n1.txt ne1.txt >&2; return 1; }
    "$PS" report n.pst --binary "nb=$T/nbcopy" 2>&1 | grep -q 'load_weights (v1.c:[0-9]*) < main'
}
check no_build_id_checked_by_size_and_mtime no_build_id

exit $status
