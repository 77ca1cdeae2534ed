/* helper.h — the wire between the `malloc` replay policy (replay/pol_malloc.c)
 * and its helper executable, poolscope-malloc-helper (replay/helper/main.c).
 * Both are built from one tree, so the structs go over the socket as they
 * are; the hello message checks that both sides agree on them.
 *
 *   parent                               helper (argv: --fd N --batch M)
 *                            <- hello    magic, protocol, struct sizes, allocator
 *   u64 n, n x rp_req_t      ->
 *                            <- reply    rp_mreply_t, then n x rp_mres_t
 *   ... until the parent closes the socket; the helper exits 0.
 */
#ifndef POOLSCOPE_RP_HELPER_H
#define POOLSCOPE_RP_HELPER_H

#include <stdint.h>

#define RP_HELPER_NAME  "poolscope-malloc-helper"
#define RP_HELPER_ENV   "POOLSCOPE_MALLOC_HELPER"   /* overrides where it is found */
#define RP_HELPER_MAGIC 0x50534d48u                 /* "PSMH" */
#define RP_HELPER_PROTO 1u
#define RP_HELPER_MAX_BATCH ((uint64_t)1 << 24)

/* Which allocator the helper found itself running on. */
enum { RP_ALLOC_GLIBC = 0, RP_ALLOC_JEMALLOC = 1, RP_ALLOC_MIMALLOC = 2 };

typedef struct rp_hello {
    uint32_t magic, proto;
    uint32_t req_size, res_size, reply_size;   /* sizeof rp_req_t, rp_mres_t, rp_mreply_t */
    int32_t  allocator;                        /* RP_ALLOC_* */
} rp_hello_t;

/* Per request: the address, the usable size and (sampled) the bytes the
 * allocator holds above its figure at start; held UINT64_MAX = no sample. */
typedef struct rp_mres { uint64_t addr, usable, held; } rp_mres_t;

/* Per batch. */
typedef struct rp_mreply {
    uint64_t n, ops, held_end, peak_rss;
    double alloc_seconds;      /* time in the allocator calls alone, so far */
    int32_t err;               /* 0 or a PSC_* code: the batch was not done */
    int32_t pad_;
} rp_mreply_t;

#endif
