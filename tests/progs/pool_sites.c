/* pool_sites.c — pool acquires, KV block allocations and mappings made from
 * known call chains, each counted by the program itself, so a test can
 * hold the sites `poolscope report` names against them (issue 30, item 1).
 *
 *   pool_sites [N]      default 40
 *
 * Chains (every function kept whole, noipa, and doing work after its call, so each
 * keeps a frame of its own in the stack, with or without frame pointers):
 *   acq_outer -> acq_inner -> bp_acquire           N acquires
 *   acq_outer2 -> acq_inner2 -> bp_acquire        2N+1 acquires
 *   kv_outer -> kv_inner -> kvb_allocate          blocks of N/4+1 calls
 *   map_outer -> map_inner -> mmap (anonymous)    N/8+1 maps of 3 pages, read-write
 *   fmap_outer -> fmap_inner -> mmap (a file)     2 maps of the file's 2 pages, read-only
 * The buffer pool and the block pool go through the pool adapter
 * (poolscope/pool_adapter.h), as an engine's would. Every mapping is
 * unmapped whole before the end, every buffer released, every block freed.
 *
 * Prints one line per chain: "<inner> <outer> calls=C bytes=B", C the
 * acquires (blocks for KV, mmap calls for mappings) and B their bytes (the
 * pool's granted bytes are the pool's to say: B is 0 there; KV: 0, the
 * block pool's slot size is the tracer's).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "poolscope/blockpool.h"
#include "poolscope/bufpool.h"
#include "poolscope/pool_adapter.h"

/* noipa: no inlining, and no folding of two functions with the same code
 * into one (the acq_ pairs are alike on purpose) */
#define NI __attribute__((noipa))

static volatile uintptr_t sink;
static bp_pool_t *pool;
static kvb_pool_t *kv;

static void die(const char *what)
{
    fprintf(stderr, "pool_sites: %s failed\n", what);
    exit(1);
}

NI static bp_buf_t *acq_inner(size_t n)
{
    int err = 0;
    bp_buf_t *b = bp_acquire(pool, n, &err);
    if (!b) die("bp_acquire");
    sink += (uintptr_t)b;
    return b;
}

NI static long acq_outer(int count)
{
    for (int i = 0; i < count; i++) bp_release(acq_inner(256 + (size_t)(i % 7) * 64));
    sink++;
    return count;
}

NI static bp_buf_t *acq_inner2(size_t n)
{
    int err = 0;
    bp_buf_t *b = bp_acquire(pool, n, &err);
    if (!b) die("bp_acquire");
    sink += (uintptr_t)b;
    return b;
}

NI static long acq_outer2(int count)
{
    for (int i = 0; i < count; i++) bp_release(acq_inner2(1000 + (size_t)(i % 3) * 500));
    sink++;
    return count;
}

NI static int kv_inner(int64_t tokens, int64_t owner, int32_t *ids)
{
    int n = kvb_allocate(kv, KVB_STREAM_KV, tokens, owner, KVB_FMT_F32, ids, 64);
    if (n <= 0) die("kvb_allocate");
    sink += (uintptr_t)n;
    return n;
}

NI static long kv_outer(int calls)
{
    long blocks = 0;
    int32_t ids[64];
    for (int i = 0; i < calls; i++) {
        int n = kv_inner(1 + (i * 13) % 70, i, ids);   /* 1 to 5 blocks of 16 tokens */
        blocks += n;
        kvb_free(kv, ids, n);
    }
    sink++;
    return blocks;
}

NI static void *map_inner(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("mmap");
    sink += (uintptr_t)p;
    return p;
}

NI static long map_outer(int calls, size_t len)
{
    for (int i = 0; i < calls; i++) {
        char *p = map_inner(len);
        p[0] = 1;
        munmap(p, len);
    }
    sink++;
    return calls;
}

NI static void *fmap_inner(int fd, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) die("mmap of the file");
    sink += (uintptr_t)p;
    return p;
}

NI static long fmap_outer(int fd, int calls, size_t len)
{
    for (int i = 0; i < calls; i++) {
        void *p = fmap_inner(fd, len);
        munmap(p, len);
    }
    sink++;
    return calls;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 40;
    if (n < 1) n = 1;
    long page = sysconf(_SC_PAGESIZE);

    bp_config_t cfg = bp_config_default();
    cfg.name = "sites";
    cfg = psa_bufpool_config(&cfg);
    int err = 0;
    pool = bp_create(&cfg, &err);
    if (!pool) die("bp_create");
    kvb_config_t kc = kvb_config_default();
    kc.block_size = 16;
    kc.n_blocks = 64;
    kc.separate_kv = false;   /* one list: KVB_STREAM_KV */
    kc.row_elems = 8;
    kc = psa_blockpool_config(&kc, "kv");
    kv = kvb_create(&kc, &err);
    if (!kv) die("kvb_create");

    printf("acq_inner acq_outer calls=%ld bytes=0\n", acq_outer(n));
    printf("acq_inner2 acq_outer2 calls=%ld bytes=0\n", acq_outer2(2 * n + 1));
    printf("kv_inner kv_outer calls=%ld bytes=0\n", kv_outer(n / 4 + 1));
    size_t len = 3 * (size_t)page;
    long maps = map_outer(n / 8 + 1, len);
    printf("map_inner map_outer calls=%ld bytes=%ld\n", maps, maps * (long)len);

    char path[] = "/tmp/pool_sites.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) die("mkstemp");
    unlink(path);
    if (ftruncate(fd, 2 * page) != 0) die("ftruncate");
    long fmaps = fmap_outer(fd, 2, 2 * (size_t)page);
    printf("fmap_inner fmap_outer calls=%ld bytes=%ld\n", fmaps, fmaps * 2 * page);
    close(fd);

    kvb_destroy(kv);
    psa_blockpool_destroyed(&kc);
    bp_destroy(pool);
    psa_bufpool_destroyed(&cfg);
    return 0;
}
