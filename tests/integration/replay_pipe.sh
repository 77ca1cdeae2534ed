#!/bin/sh
# replay_pipe.sh — `replay` reads a trace from a pipe, /dev/stdin or a FIFO
# (issue 12, item 5): replay reads its input more than once (pre-scan, then
# the pass), so anything but a regular file is taken into memory first.
# The figures from a pipe equal those from the file, policy by policy; a
# pipe that is cut short is refused as a damaged trace, never misread.
. tests/integration/lib.sh

"$PS" record -o "$T/x.pst" -- "$B/bin/refengine" --synthetic dim=32,layers=1,heads=2,kv_heads=2,hidden=64,vocab=64,seq=64 \
    --workload fixed:8,8 --requests 3 --max-batch 2 --quiet > /dev/null 2>&1
check record_trace [ -s "$T/x.pst" ]

# every policy but malloc (it measures this process's allocator: pages
# touched vary between runs); timing keys left out
POL=arena,pool,ideal,kv-contiguous,kv-reserve,kv-step,kv-paged
same_json() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
skip = {"seconds", "read_seconds", "events_per_s", "ns_per_op"}
def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if k not in skip}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v
a, b = (strip(json.load(open(p))) for p in sys.argv[1:3])
if not a["policies"]:
    sys.exit("no policy ran")
if a != b:
    for pa, pb in zip(a["policies"], b["policies"]):
        for k in pa:
            if pa[k] != pb.get(k):
                print("  %s.%s: file %r, pipe %r" % (pa["name"], k, pa[k], pb.get(k)), file=sys.stderr)
    sys.exit(1)
EOF
}

"$PS" replay "$T/x.pst" --policy $POL --json > "$T/file.json" 2> "$T/file.err"
check replay_file_runs [ -s "$T/file.json" ]

cat "$T/x.pst" | "$PS" replay - --policy $POL --json > "$T/pipe.json" 2> "$T/pipe.err"; rc=$?
check replay_reads_pipe sh -c "[ $rc -eq 0 ] || { cat '$T/pipe.err' >&2; exit 1; }"
check replay_pipe_same_figures same_json "$T/file.json" "$T/pipe.json"

cat "$T/x.pst" | "$PS" replay /dev/stdin --policy $POL --json > "$T/stdin.json" 2> "$T/stdin.err"; rc=$?
check replay_reads_dev_stdin sh -c "[ $rc -eq 0 ] || { cat '$T/stdin.err' >&2; exit 1; }"
check replay_dev_stdin_same_figures same_json "$T/file.json" "$T/stdin.json"

# the default policy set (KV policies only when the trace has KV) from a pipe
"$PS" replay "$T/x.pst" --json > "$T/fdef.json" 2>/dev/null
"$PS" replay - --json < "$T/x.pst" > "$T/rdef.json" 2>/dev/null
cat "$T/x.pst" | "$PS" replay - --json > "$T/pdef.json" 2>/dev/null; rc=$?
check replay_pipe_default_policies sh -c "[ $rc -eq 0 ] && python3 -c \"
import json
f = [p['name'] for p in json.load(open('$T/fdef.json'))['policies']]
p = [p['name'] for p in json.load(open('$T/pdef.json'))['policies']]
r = [p['name'] for p in json.load(open('$T/rdef.json'))['policies']]
assert f and f == p == r, (f, p, r)
\""

# a FIFO is not a regular file either (a reader that opens it twice would
# wait for a second writer for ever: bounded here)
mkfifo "$T/fifo"
cat "$T/x.pst" > "$T/fifo" &
writer=$!
timeout 60 "$PS" replay "$T/fifo" --policy $POL --json > "$T/fifo.json" 2> "$T/fifo.err"; rc=$?
kill "$writer" 2>/dev/null
wait "$writer" 2>/dev/null
check replay_reads_fifo sh -c "[ $rc -eq 0 ] || { cat '$T/fifo.err' >&2; exit 1; }"
check replay_fifo_same_figures same_json "$T/file.json" "$T/fifo.json"

# a pipe cut short: refused (exit 2, one line), as the same bytes in a file are
half=$(( $(wc -c < "$T/x.pst") / 2 ))
head -c "$half" "$T/x.pst" > "$T/half.pst"
"$PS" replay "$T/half.pst" > /dev/null 2> "$T/half_file.err"; rc_file=$?
head -c "$half" "$T/x.pst" | "$PS" replay - > /dev/null 2> "$T/half_pipe.err"; rc_pipe=$?
check replay_cut_pipe_refused sh -c "[ $rc_pipe -eq 2 ] && [ \$(wc -l < '$T/half_pipe.err') -eq 1 ] && grep -q 'truncated' '$T/half_pipe.err'"
check replay_cut_pipe_as_file sh -c "[ $rc_file -eq $rc_pipe ] && [ \"\$(sed 's/^[^:]*: [^:]*: //' '$T/half_file.err')\" = \"\$(sed 's/^[^:]*: [^:]*: //' '$T/half_pipe.err')\" ]"
# an empty pipe: one line saying the header is missing
: | "$PS" replay - > /dev/null 2> "$T/empty.err"; rc=$?
check replay_empty_pipe_refused sh -c "[ $rc -eq 2 ] && [ \$(wc -l < '$T/empty.err') -eq 1 ] && grep -q 'header' '$T/empty.err'"
# a missing file is still named as one
"$PS" replay "$T/nosuch.pst" > /dev/null 2> "$T/nosuch.err"; rc=$?
check replay_missing_file_refused sh -c "[ $rc -eq 2 ] && grep -q 'No such file' '$T/nosuch.err'"
exit $status
