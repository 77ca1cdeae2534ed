# promtool.sh — the block pool's Prometheus exposition passes
# `promtool check metrics` (syntax and lint), and the check can fail: a
# deliberately broken text and a gauge named like a counter are rejected.
. tests/integration/lib.sh

PROM=$PROGS/kvb_prom
if ! command -v promtool >/dev/null 2>&1; then
    echo "not ok promtool_installed (apt-get install prometheus)"
    exit 1
fi

check kvb_prom_runs sh -c '"$1" >"$2/metrics.txt"' sh "$PROM" "$T"
check kvb_prom_text_passes_promtool sh -c 'promtool check metrics <"$1/metrics.txt"' sh "$T"
check kvb_prom_has_every_metric sh -c '
    for m in blocks_in_use blocks_managed fragmentation peak_blocks_in_use \
             allocations_total frees_total reused_total exhausted_total \
             grown_total retired_total; do
        grep -q "^# HELP poolscope_block_pool_$m " "$1" &&
        grep -q "^# TYPE poolscope_block_pool_$m " "$1" &&
        grep -Eq "^poolscope_block_pool_$m [0-9.e+-]+\$" "$1" || { echo "missing $m"; exit 1; }
    done' sh "$T/metrics.txt"
check kvb_prom_counters_are_counters sh -c '
    [ "$(grep -c "^# TYPE .*_total counter\$" "$1")" -eq 6 ] &&
    [ "$(grep -c "^# TYPE .* gauge\$" "$1")" -eq 4 ]' sh "$T/metrics.txt"
check kvb_prom_custom_prefix_passes_promtool sh -c '
    "$1" vq_block_pool >"$2/vq.txt" && grep -q "^vq_block_pool_allocations_total " "$2/vq.txt" &&
    promtool check metrics <"$2/vq.txt"' sh "$PROM" "$T"

# The check must be able to fail.
check promtool_rejects_broken_text sh -c '
    { cat "$1/metrics.txt"; echo "poolscope_block_pool_broken{"; } >"$1/broken.txt"
    ! promtool check metrics <"$1/broken.txt" >/dev/null 2>&1' sh "$T"
check promtool_rejects_gauge_with_total_suffix sh -c '
    sed "s/blocks_managed/blocks_total/g" "$1/metrics.txt" >"$1/lint.txt"
    ! promtool check metrics <"$1/lint.txt" >/dev/null 2>&1' sh "$T"

exit $status
