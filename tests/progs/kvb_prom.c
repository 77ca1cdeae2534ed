/* kvb_prom.c — prints the block pool's Prometheus exposition after a small
 * workload (prefill + decode for a few requests, one exhaustion, a growth and
 * a shrink), for tests/integration/promtool.sh.
 * Usage: kvb_prom [PREFIX]   (exit 2 on a library error) */
#include <stdio.h>
#include <stdlib.h>

#include "poolscope/blockpool.h"

static int die(const char *what, int rc)
{
    fprintf(stderr, "kvb_prom: %s: %s\n", what, psc_strerror(rc));
    return 2;
}

int main(int argc, char **argv)
{
    const char *prefix = argc > 1 ? argv[1] : NULL;
    kvb_config_t cfg = kvb_config_default();
    cfg.block_size = 16;
    cfg.n_blocks = 64;
    cfg.grow_on_exhaustion = true;
    cfg.max_blocks = 80;
    int rc;
    kvb_pool_t *p = kvb_create(&cfg, &rc);
    if (!p)
        return die("create", rc);
    kvb_cache_t *live[4] = { NULL, NULL, NULL, NULL };
    for (int64_t req = 0; req < 4; req++) {
        kvb_cache_t *c = kvb_cache_create(p, req, KVB_FMT_INT4, &rc);
        if (!c)
            return die("cache", rc);
        if ((rc = kvb_cache_append(c, NULL, NULL, 120 + (int32_t)req * 60)) < 0)
            return die("prefill", rc);
        for (int t = 0; t < 40; t++)
            if ((rc = kvb_cache_append(c, NULL, NULL, 1)) < 0)
                return die("decode", rc);
        if (req % 2 == 0)
            kvb_cache_destroy(c);
        else
            live[req] = c;            /* two requests stay live */
    }
    int32_t ids[64];
    rc = kvb_allocate(p, KVB_STREAM_K, 16 * 60, 99, KVB_FMT_F16, ids, 64);
    if (rc != PSC_EEXHAUSTED)
        return die("expected exhaustion", rc);
    kvb_cache_destroy(live[1]);
    if ((rc = kvb_shrink(p, KVB_STREAM_V, 4)) < 0)
        return die("shrink", rc);
    kvb_stats_t s;
    kvb_stats(p, &s);
    char buf[4096];
    rc = kvb_stats_prometheus(&s, prefix, buf, sizeof buf);
    if (rc < 0)
        return die("prometheus", rc);
    if ((size_t)rc >= sizeof buf)
        return die("prometheus", PSC_ERANGE);
    fputs(buf, stdout);
    kvb_cache_destroy(live[3]);
    kvb_destroy(p);
    return 0;
}
