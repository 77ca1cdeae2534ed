#!/bin/sh
# json_bytes.sh — every JSON output is valid JSON in strict UTF-8 whatever
# bytes a recorded program's names hold (issue 27 item 7: `report --json`
# wrote non-UTF-8 argv bytes raw). hostile_names.sh writes its traces with
# the writer API; here the names come the way a user's do: a real program
# recorded by `poolscope record` (the preload library), with
#   - argv bytes that are not UTF-8: \xff\xfe, an overlong '/' (\xc0\xaf),
#     a truncated 3-byte sequence (\xe2\x82), a UTF-16 surrogate
#     (\xed\xa0\x80), next to good UTF-8 (é, €)
#   - a function whose symbol holds \xff\xfe (an asm label), the site of
#     every allocation, so symbolized names carry the bytes
#   - a marker named with the same bytes (the event API)
# Checked with python's json module on text decoded as strict UTF-8 (json
# alone accepts lone surrogates and decodes nothing), for report --json
# (and --full), replay --json, diff --json, export --format chrome and the
# HTML report's data; and that the rule of analyzer/REPORT.md holds: each
# byte outside well-formed UTF-8 is one U+FFFD, good UTF-8 is kept.
. tests/integration/lib.sh

D=$T/w
mkdir -p "$D"
cat > "$D/prog.c" <<'EOF'
#include <stdlib.h>
#include "poolscope/poolscope.h"
#define BAD "mk\377\376\300\257\342\202\355\240\200\303\251"
__attribute__((noinline)) void *bad_fn(size_t n) __asm__("bad_\377\376_fn");
__attribute__((noinline)) void *bad_fn(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
int main(int argc, char **argv)
{
    (void)argv;
    void *keep[64];
    int n = argc < 8 ? 32 + 4 * argc : 64;     /* two runs differ: diff has rows */
    for (int i = 0; i < n; i++) {
        ps_begin(BAD, (unsigned)i, NULL, 0);
        keep[i] = bad_fn(100 + (size_t)i * 64);
        ps_end(BAD, (unsigned)i);
    }
    for (int i = 0; i < n / 2; i++) free(keep[i]);
    return 0;
}
EOF
cc -std=gnu11 -g -O1 -fPIE -pie -I"$ROOT/include" -o "$D/prog" "$D/prog.c" "$B/lib/libpstrace.a" "$B/lib/libpscommon.a" \
    -lzstd -lz -ldl -pthread
check program_builds [ -x "$D/prog" ]
"$PS" record -o "$D/t.pst" -- "$D/prog" "$(printf '\377\376x')" "$(printf '\300\257')" "$(printf 'tr\342\202')" \
    "$(printf 's\355\240\200')" "$(printf 'ok\303\251\342\202\254')" > /dev/null 2>&1
"$PS" record -o "$D/u.pst" -- "$D/prog" "$(printf '\377\376y')" > /dev/null 2>&1
check recorded sh -c "[ -s '$D/t.pst' ] && [ -s '$D/u.pst' ]"

# json_ok FILE [PY]: strict UTF-8, valid JSON, and PY (an expression over d and t, the text) true
json_ok() {
    python3 - "$1" "${2:-True}" <<'PY'
import sys, json
raw = open(sys.argv[1], 'rb').read()
try:
    t = raw.decode('utf-8', errors='strict')
    d = json.loads(t)
except Exception as e:
    print('  %s: %s' % (sys.argv[1], e), file=sys.stderr); sys.exit(1)
if not eval(sys.argv[2]):
    print('  %s: %s is false' % (sys.argv[1], sys.argv[2]), file=sys.stderr); sys.exit(1)
PY
}
F='\ufffd'
MARK="'mk' + '$F' * 9 + '\u00e9'"

"$PS" report "$D/t.pst" --json > "$D/r.json" 2> /dev/null
check report_json_valid json_ok "$D/r.json"
# one U+FFFD per byte that is not part of well-formed UTF-8; good UTF-8 kept
check report_json_argv_rule json_ok "$D/r.json" \
    "d['argv'][1:] == ['$F$F' + 'x', '$F$F', 'tr$F$F', 's$F$F$F', 'ok\u00e9\u20ac']"
check report_json_marker json_ok "$D/r.json" "($MARK) in d['phases']"
check report_json_function json_ok "$D/r.json" "'bad_$F${F}_fn' in json.dumps(d, ensure_ascii=False)"
"$PS" report "$D/t.pst" --json --full > "$D/rf.json" 2> /dev/null
check report_full_json_valid json_ok "$D/rf.json"
"$PS" replay "$D/t.pst" --json > "$D/rp.json" 2> /dev/null
check replay_json_valid json_ok "$D/rp.json" "any(($MARK) in w for w in d['warnings'])"
"$PS" diff "$D/u.pst" "$D/t.pst" --json > "$D/d.json" 2> /dev/null
check diff_json_valid json_ok "$D/d.json" \
    "any(($MARK) in m['metric'] for m in d['metrics']) and 'bad_$F${F}_fn' in json.dumps(d['sites'], ensure_ascii=False)"
"$PS" export "$D/t.pst" --format chrome -o "$D/c.json" > /dev/null 2>&1
check chrome_json_valid json_ok "$D/c.json" "any(e.get('name') == ($MARK) for e in d['traceEvents'])"
"$PS" html "$D/t.pst" -o "$D/t.html" > /dev/null 2>&1
check html_data_valid python3 - "$D/t.html" <<'PY'
import sys, json, re
t = open(sys.argv[1], 'rb').read().decode('utf-8', errors='strict')
blocks = re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', t, re.S)
assert blocks, 'no data block'
s = json.dumps([json.loads(b) for b in blocks], ensure_ascii=False)
assert '\ufffd\ufffdx' in s, 'argv not in the data'
assert 'bad_\ufffd\ufffd_fn' in s, 'function not in the data'
PY
exit $status
