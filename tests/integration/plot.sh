#!/bin/sh
# plot.sh — what `poolscope plot` draws (issue 12, plot items), checked in
# its data files and gnuplot scripts against counts taken independently of
# the analyzer: the trace's events counted by `poolscope sql` + sqlite3 and
# by pstdump.
#   - sizes / lifetimes have a pool-acquire series next to the heap one, and
#     its counts add up to the POOL_ACQUIRE / POOL_RECLAIM events; the heap
#     series to the allocating heap calls
#   - reuse_cdf: the pool series counts the acquires served from the cache;
#     a series with fewer than 20 re-uses is not drawn, and that is said
#   - memory: the markers are a plot of their own below the memory plot
#     (no overlap of the two panels), one row per marker name with its count
#   - policies: two panels when the JSON has both groups, one otherwise
#   - --phase / --from --to restrict the counts; the titles say what is
#     whole-run; an unknown phase is exit 2 naming the phases, and leaves
#     no directory
. tests/integration/lib.sh

D=$T/w
mkdir -p "$D"
"$PS" record -o "$D/e.pst" -- "$B/bin/refengine" --alloc pool --quiet > /dev/null 2>&1
check record_refengine [ -s "$D/e.pst" ]
"$PS" replay "$D/e.pst" --json > "$D/all.json" 2> /dev/null
check replay_all_groups python3 -c "
import json; n = [p['name'] for p in json.load(open('$D/all.json'))['policies']]
assert 'pool' in n and any(x.startswith('kv') for x in n), n"
"$PS" replay "$D/e.pst" --policy malloc,arena,pool,ideal --json > "$D/tensor.json" 2> /dev/null
"$PS" replay "$D/e.pst" --policy kv --json > "$D/kv.json" 2> /dev/null

# the independent counts
"$PS" sql "$D/e.pst" -o "$D/e.db" > /dev/null
q() { sqlite3 "$D/e.db" "select count(*) from events e join event_types t on t.type = e.type where $1"; }
acquires=$(q "t.name = 'pool_acquire'")
reclaims=$(q "t.name = 'pool_reclaim'")
"$DUMP" "$D/e.pst" > "$D/dump"
hits=$(sed -n 's/^pool\.[0-9]*\.hits=//p' "$D/dump" | awk '{s += $1} END {print s + 0}')
heap_allocs=$(key "$D/dump" alloc_calls)
echo "  trace: $acquires pool acquires, $reclaims reclaims, $hits cache hits, $heap_allocs heap allocations" >&2
check trace_has_many_acquires [ "$acquires" -gt 500 ]

"$PS" plot "$D/e.pst" -o "$D/p" --replay "$D/all.json" > "$D/made" 2> "$D/notes"
check plot_runs [ -s "$D/p/memory.png" ]
for f in memory sizes lifetimes reuse_cdf kv policies; do
    check "plot_${f}_png_made" grep -qx "$D/p/$f.png" "$D/made"
done

# sum FILE COLUMN: the column's total over the data rows
sum() { awk -v c="$2" '!/^#/ && NF { s += $c } END { printf "%d\n", s }' "$1"; }
# eq NAME GOT WANT, with both in the message when they differ
eq() { [ "$2" = "$3" ] || { echo "  $1: got $2, want $3" >&2; return 1; }; }
check sizes_pool_series_is_the_acquires eq sizes "$(sum "$D/p/sizes.dat" 4)" "$acquires"
check sizes_heap_series_is_the_heap_allocations eq sizes "$(sum "$D/p/sizes.dat" 2)" "$heap_allocs"
check lifetimes_pool_series_is_the_reclaims eq lifetimes "$(sum "$D/p/lifetimes.dat" 4)" "$reclaims"
check reuse_pool_series_is_the_cache_hits eq reuse "$(sum "$D/p/reuse_cdf.dat" 4)" "$hits"
check sizes_two_panels_labelled sh -c "grep -q 'multiplot layout 2,1' '$D/p/sizes.gp' &&
    grep -qF '\"heap ($heap_allocs allocations)\"' '$D/p/sizes.gp' && grep -q '\"pool acquires (' '$D/p/sizes.gp' &&
    [ \$(grep -c '^plot' '$D/p/sizes.gp') -eq 2 ]"
check lifetimes_two_panels [ "$(grep -c '^plot' "$D/p/lifetimes.gp")" -eq 2 ]

# reuse_cdf: the heap of refengine re-uses (almost) no address: too few
heap_reuses=$(sum "$D/p/reuse_cdf.dat" 2)
check heap_reuses_are_few [ "$heap_reuses" -lt 20 ]
check reuse_few_heap_not_drawn sh -c "! grep -q 'using 1:3 ' '$D/p/reuse_cdf.gp' && grep -q 'using 1:5 ' '$D/p/reuse_cdf.gp'"
check reuse_few_heap_said_in_title grep -q "heap: only $heap_reuses re-uses, too few for a CDF" "$D/p/reuse_cdf.gp"
check reuse_few_heap_noted grep -q "^poolscope plot: note: reuse_cdf: heap: only $heap_reuses re-uses" "$D/notes"

# memory: two plots; the first the memory curves only, the second the
# markers only, in a panel below the first (its height <= the first's origin)
check memory_markers_in_own_plot python3 -c "
import re
gp = open('$D/p/memory.gp').read()
assert 'set multiplot' in gp, 'no multiplot'
plots = re.findall(r'^plot (.*?)(?<!\\\\)\$', gp, re.M | re.S)
assert len(plots) == 2, len(plots)
assert 'timeline.dat' in plots[0] and 'markers.dat' not in plots[0] and 'x1y2' not in gp, plots[0]
assert 'markers.dat' in plots[1] and 'timeline.dat' not in plots[1], plots[1]
org = [float(y) for y in re.findall(r'^set origin 0,([0-9.]+)', gp, re.M)]
size = [float(h) for h in re.findall(r'^set size 1,([0-9.]+)', gp, re.M)]
assert org[1] == 0 and size[1] <= org[0] + 1e-9 and org[0] + size[0] <= 1, (org, size)
"
# one lane row per marker name, with pstdump's count of its points and begins
check memory_lane_rows_are_the_markers python3 -c "
import re
gp = open('$D/p/memory.gp').read()
rows = dict(re.findall(r'\"([^\"(]+) \(([0-9,]+)\)\" [0-9]+', re.search(r'set ytics \((.*)\)', gp).group(1)))
want = {l.split('=')[0][5:]: l.split('=')[1].strip() for l in open('$D/dump') if l.startswith('mark.')}
got = {k: v.replace(',', '') for k, v in rows.items()}
assert got == want, (got, want)
rows_dat = {int(l.split()[2]) for l in open('$D/p/markers.dat') if not l.startswith('#')}
assert rows_dat == set(range(len(want))), rows_dat
"

# policies: a panel per group present
check policies_two_panels sh -c "grep -q 'multiplot layout 1,2' '$D/p/policies.gp' && [ \$(grep -c '^plot' '$D/p/policies.gp') -eq 2 ]"
check policies_panels_own_groups python3 -c "
blocks = open('$D/p/policies.dat').read().split('\n\n\n')
names = [[l.split()[0].strip('\"') for l in b.splitlines() if l and not l.startswith('#')] for b in blocks]
assert len(names) == 2 and not any(n.startswith('kv') for n in names[0]) and all(n.startswith('kv') for n in names[1]), names
"
"$PS" plot --replay "$D/kv.json" -o "$D/pk" --quiet
check policies_kv_only_one_panel sh -c "[ \$(grep -c '^plot' '$D/pk/policies.gp') -eq 1 ] && ! grep -q multiplot '$D/pk/policies.gp' &&
    grep -q 'KV cache policies' '$D/pk/policies.gp' && ! grep -q '^\"malloc\"' '$D/pk/policies.dat'"
"$PS" plot --replay "$D/tensor.json" -o "$D/pt" --quiet
check policies_tensor_only_one_panel sh -c "[ \$(grep -c '^plot' '$D/pt/policies.gp') -eq 1 ] && ! grep -q '^\"kv' '$D/pt/policies.dat'"

# --phase: the histograms count the phase (pstdump --scope counts the events
# inside its scopes), the timeline is whole-run and says so
"$PS" plot "$D/e.pst" -o "$D/ph" --phase decode --quiet
in_decode=$("$DUMP" --scope decode "$D/e.pst" | sed -n 's/^pool_acquire=//p')
check phase_counts_only_the_phase eq phase "$(sum "$D/ph/sizes.dat" 4)" "${in_decode:-0}"
check phase_fewer_than_whole_run sh -c "[ ${in_decode:-0} -gt 0 ] && [ ${in_decode:-0} -lt $acquires ]"
check phase_memory_says_whole_run grep -q "whole run: a phase is not one span of time" "$D/ph/memory.gp"
check phase_sizes_title_names_it grep -q "phase 'decode'" "$D/ph/sizes.gp"

# --from/--to: counts of the window (sqlite on the same times), the time
# axis and the marker lane within it. The window is the middle third of the
# pool's activity, so it holds acquires however fast this machine ran it.
span=$(sqlite3 "$D/e.db" "select min(e.ts_ns), max(e.ts_ns) from events e join event_types t on t.type = e.type where t.name = 'pool_acquire'")
w0=$(echo "$span" | awk -F'|' '{printf "%d", $1 + ($2 - $1) / 3}')
w1=$(echo "$span" | awk -F'|' '{printf "%d", $1 + 2 * ($2 - $1) / 3}')
"$PS" plot "$D/e.pst" -o "$D/win" --from "${w0}ns" --to "${w1}ns" --quiet
in_win=$(q "t.name = 'pool_acquire' and e.ts_ns >= $w0 and e.ts_ns <= $w1")
check window_counts_only_the_window eq window "$(sum "$D/win/sizes.dat" 4)" "$in_win"
check window_nonempty sh -c "[ $in_win -gt 0 ] && [ $in_win -lt $acquires ]"
check window_time_axis python3 -c "
import re
gp = open('$D/win/memory.gp').read()
lo, hi = map(float, re.search(r'set xrange \[([-0-9.e]+):([-0-9.e]+)\]', gp).groups())
w0, w1 = $w0 / 1e9, $w1 / 1e9
assert w0 - 1e-3 <= lo and hi <= w1 + 1e-3 and hi - lo >= (w1 - w0) / 2, (lo, hi, w0, w1)
for l in open('$D/win/markers.dat'):
    if l.startswith('#'): continue
    a, b = map(float, l.split()[:2])
    assert lo - 1e-6 <= a <= b <= hi + 1e-3, (a, b)
assert re.search(r'from [0-9.]+ [mun]?s to [0-9.]+ [mun]?s', gp), 'no window in the title'
"

# refusals: exit 2, one line, nothing left behind
"$PS" plot "$D/e.pst" -o "$D/nosuch" --phase nosuch > "$T/out" 2> "$T/err"; rc=$?
check unknown_phase_exit_2 eq rc "$rc" 2
check unknown_phase_lists_phases sh -c "[ \$(wc -l < '$T/err') -eq 1 ] && grep -q \"no phase 'nosuch'.*: request, .*decode\" '$T/err'"
check unknown_phase_left_no_directory sh -c "[ ! -e '$D/nosuch' ] && ! ls -A '$D' | grep -q '^\.'"
"$PS" plot --replay "$D/all.json" -o "$D/x" --phase decode 2> /dev/null; rc=$?
check phase_without_trace_usage eq rc "$rc" 2
"$PS" plot "$D/e.pst" -o "$D/x" --from 2s --to 1s 2> /dev/null; rc=$?
check from_after_to_usage eq rc "$rc" 2
check refusals_made_nothing [ ! -e "$D/x" ]

# a program without markers or pools: one memory plot, one size panel
cat > "$T/m.c" <<'C'
#include <stdlib.h>
int main(void) {
    for (int r = 0; r < 40; r++) {
        void *p[50];
        for (int i = 0; i < 50; i++) p[i] = malloc(32 + (size_t)i * 8);
        for (int i = 0; i < 50; i++) free(p[i]);
    }
    return 0;
}
C
cc -O1 -o "$T/m" "$T/m.c"
"$PS" record -o "$D/m.pst" -- "$T/m" > /dev/null 2>&1
"$PS" plot "$D/m.pst" -o "$D/pm" --quiet
check plain_memory_one_plot sh -c "[ \$(grep -c '^plot' '$D/pm/memory.gp') -eq 1 ] && ! grep -q markers.dat '$D/pm/memory.gp'"
check plain_sizes_one_panel_says_no_pool sh -c "[ \$(grep -c '^plot' '$D/pm/sizes.gp') -eq 1 ] && grep -q 'no pool acquires' '$D/pm/sizes.gp'"
check plain_heap_cdf_drawn sh -c "[ $(sum "$D/pm/reuse_cdf.dat" 2) -ge 20 ] && grep -q 'using 1:3 ' '$D/pm/reuse_cdf.gp' &&
    ! grep -q 'using 1:5 ' '$D/pm/reuse_cdf.gp'"
check plain_sizes_sum eq sizes "$(sum "$D/pm/sizes.dat" 2)" 2000
exit $status
