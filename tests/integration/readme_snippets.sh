#!/bin/sh
# readme_snippets.sh — what the README shows a user, done as it says
# (issue 30, item 9): the event-API snippet of "Annotate your own pool or
# engine" compiles as C and as C++ (g++ and clang++) against the headers;
# `make install PREFIX=...` puts a `poolscope` on PATH that records and
# reads, and the README says `make install PREFIX=~/.local` exactly once;
# the README makes replay.json with `replay ... --json -o replay.json`
# before `html ... --replay replay.json` uses it, and both commands, run
# as printed on a trace of refengine, work.
. tests/integration/lib.sh
README=$ROOT/README.md

# the code block that holds #include <poolscope/poolscope.h>
python3 - "$README" "$T/snip" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = [b for b in re.findall(r'```c\n(.*?)```', text, re.S) if '#include <poolscope/poolscope.h>' in b]
assert len(blocks) == 1, len(blocks)
inc = [l for l in blocks[0].splitlines() if l.startswith('#include')]
body = [l for l in blocks[0].splitlines() if not l.startswith('#include')]
src = '\n'.join(['#include <stdint.h>'] + inc + [
    'void annotate(uint64_t req_id, int64_t prompt_len, int64_t max_tokens, uint64_t tensor_id,',
    '              uint64_t n_elems, uint64_t bytes);',
    'void annotate(uint64_t req_id, int64_t prompt_len, int64_t max_tokens, uint64_t tensor_id,',
    '              uint64_t n_elems, uint64_t bytes)', '{'] + ['    ' + l for l in body] + ['}', ''])
open(sys.argv[2] + '.c', 'w').write(src)
open(sys.argv[2] + '.cpp', 'w').write(src)
PY
snippet() {
    [ -s "$T/snip.c" ] || return 1
    cc -std=c11 -Wall -Wextra -Werror -c -I"$ROOT/include" -o "$T/snip_c.o" "$T/snip.c" 2>"$T/c.err" ||
        { echo "  as C:" >&2; head -5 "$T/c.err" >&2; return 1; }
    for cxx in g++ clang++; do
        command -v $cxx >/dev/null || continue
        $cxx -std=c++17 -Wall -Wextra -Werror -c -I"$ROOT/include" -o "$T/snip_$cxx.o" "$T/snip.cpp" 2>"$T/cxx.err" ||
            { echo "  as C++ ($cxx):" >&2; head -5 "$T/cxx.err" >&2; return 1; }
    done
}
check readme_event_api_snippet_compiles_as_c_and_cxx snippet

install_once() {
    n=$(grep -c 'make install PREFIX=~/.local' "$README")
    [ "$n" = 1 ] || { echo "  README says 'make install PREFIX=~/.local' $n times" >&2; return 1; }
}
check readme_says_make_install_prefix_once install_once
on_path() {
    make --no-print-directory install PREFIX="$T/local" BUILD="$BUILD" >"$T/inst.log" 2>&1 || { tail -5 "$T/inst.log" >&2; return 1; }
    (
        PATH=$T/local/bin:/usr/bin:/bin; export PATH
        unset POOLSCOPE_PRELOAD_LIB
        [ "$(command -v poolscope)" = "$T/local/bin/poolscope" ] || { echo "  poolscope is $(command -v poolscope)" >&2; exit 1; }
        cd "$T" && poolscope record -o p.pst -- /bin/true >/dev/null 2>&1 && poolscope report p.pst >/dev/null
    )
}
check make_install_puts_poolscope_on_path on_path

order() {
    r=$(grep -n 'replay run.pst --json -o replay.json' "$README" | head -1 | cut -d: -f1)
    h=$(grep -n 'html run.pst -o run.html --replay replay.json' "$README" | head -1 | cut -d: -f1)
    [ -n "$r" ] && [ -n "$h" ] && [ "$r" -lt "$h" ] || { echo "  replay.json made at line ${r:-none}, used at ${h:-none}" >&2; return 1; }
}
check readme_makes_replay_json_before_html order
as_printed() {
    (cd "$T" && "$PS" record -o run.pst -- "$B/bin/refengine" --synthetic dim=32,layers=1,heads=2,kv_heads=2,hidden=64,vocab=64,seq=64 \
        --workload fixed:8,8 --requests 2 --max-batch 2 --quiet >/dev/null 2>&1) || return 1
    grep -E '^build/bin/poolscope (replay run.pst --json -o replay.json|html run.pst -o run.html --replay replay.json)' "$README" |
        sed 's/ *#.*$//; s|^build/bin/poolscope||' >"$T/cmds"
    [ "$(grep -c . "$T/cmds")" = 2 ] || return 1
    while read -r line; do
        (cd "$T" && eval "\"\$PS\" $line") >/dev/null 2>"$T/cmd.err" || { echo "  poolscope$line:" >&2; cat "$T/cmd.err" >&2; return 1; }
    done <"$T/cmds"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['policies'], d" "$T/replay.json" &&
        grep -q '"policies"' "$T/run.html"
}
check readme_replay_then_html_as_printed as_printed
exit $status
