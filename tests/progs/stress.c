/* stress.c — many threads hammering the heap, with exact counts of their
 * own calls and a checksum that does not depend on timing, so a test can
 * compare a traced run with an untraced one and with the trace.
 *
 *   stress [-t THREADS] [-n OPS]        defaults 8 threads, 1000000 ops each
 *
 * Each thread runs OPS operations drawn from its own xorshift generator
 * over 512 private slots: an empty slot gets malloc (3/4) or calloc (1/4)
 * of a varied size (mostly 16..256 bytes, some up to 4 KiB and 64 KiB,
 * rarely 128..512 KiB); a full slot is freed (1/2), realloc'd to another
 * size (3/10) or handed off (1/5) through one of 64 shared slots, each
 * guarded by its own mutex: the thread swaps its block in and frees the
 * block it took out, which another thread usually allocated (a cross-thread
 * free). At the end each thread frees its own slots, and the main thread
 * frees what is left in the shared slots.
 *
 * Every block carries a tag (from its thread and operation index) in its
 * first and last 8 bytes; calloc'd memory is checked for zeros, a realloc'd
 * block for its preserved head and (when it grew) old tail, and every block
 * is checked when freed. The checksum mixes the tag and final size of every
 * freed block with a commutative sum: which thread frees a block depends on
 * timing, the set of freed blocks does not.
 *
 * Every heap call of a thread happens between the markers begin/end
 * "counted" (instance = thread index; the main thread's cleanup uses
 * instance THREADS), so `pstdump --scope counted` counts exactly these
 * calls. free(NULL) is never called. Prints on stdout, in pstdump's names:
 * calloc, free, malloc, realloc (summed over threads), then ops, errors and
 * checksum — all independent of timing. The number of blocks freed by a
 * thread other than the allocating one goes to stderr
 * ("cross_thread_frees=N"), since it depends on timing. Exit 1 on a
 * detected corruption or allocation failure.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "poolscope/poolscope.h"

#define MAX_THREADS 64
#define LOCAL_SLOTS 512
#define SHARED_SLOTS 64

/* Through volatile pointers: the compiler must make every call it counts. */
static void *(*volatile f_malloc)(size_t) = malloc;
static void *(*volatile f_calloc)(size_t, size_t) = calloc;
static void *(*volatile f_realloc)(void *, size_t) = realloc;
static void (*volatile f_free)(void *) = free;

typedef struct block {
    unsigned char *p;             /* NULL: empty */
    size_t size;
    uint64_t tag;
    int owner;                    /* allocating thread */
} block_t;

typedef struct shared_slot {
    pthread_mutex_t mu;
    block_t b;
} shared_slot_t;

static shared_slot_t shared[SHARED_SLOTS];

typedef struct worker {
    int index;
    long ops;
    unsigned long n_malloc, n_calloc, n_realloc, n_free, cross, errors;
    uint64_t sum;
    block_t slot[LOCAL_SLOTS];
} worker_t;

static uint64_t next_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* 16..256 (70%), ..4 KiB (25%), ..64 KiB (4.9%), 128..512 KiB (0.1%);
 * a multiple of 16 (calloc splits it as n x 16). */
static size_t pick_size(uint64_t r)
{
    unsigned c = (unsigned)(r % 1000);
    r /= 1000;
    size_t lo, hi;
    if (c < 700) { lo = 16; hi = 256; }
    else if (c < 950) { lo = 256; hi = 4096; }
    else if (c < 999) { lo = 4096; hi = 65536; }
    else { lo = 131072; hi = 524288; }
    return (lo + (size_t)(r % (hi - lo + 1))) & ~(size_t)15;
}

static uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static void store64(unsigned char *p, uint64_t v) { memcpy(p, &v, sizeof v); }

static void put_tags(block_t *b)
{
    store64(b->p, b->tag);
    store64(b->p + b->size - 8, ~b->tag);
}

static int tags_ok(const block_t *b)
{
    return load64(b->p) == b->tag && load64(b->p + b->size - 8) == ~b->tag;
}

/* Check, account and free a block (never NULL). */
static void release(worker_t *w, block_t *b)
{
    if (!tags_ok(b)) w->errors++;
    w->sum += mix(b->tag ^ ((uint64_t)b->size << 40));
    if (b->owner != w->index) w->cross++;
    f_free(b->p);
    w->n_free++;
    b->p = NULL;
}

static void fail(worker_t *w, const char *what)
{
    fprintf(stderr, "stress: thread %d: %s failed: %s\n", w->index, what, strerror(errno));
    exit(1);
}

static void op(worker_t *w, uint64_t *rng, long i)
{
    uint64_t r = next_rand(rng);
    block_t *b = &w->slot[r % LOCAL_SLOTS];
    r /= LOCAL_SLOTS;
    unsigned kind = (unsigned)(r % 20);
    r /= 20;

    if (!b->p) {
        size_t sz = pick_size(r);
        b->size = sz;
        b->tag = mix(((uint64_t)w->index << 32) ^ (uint64_t)i);
        b->owner = w->index;
        if (kind < 15) {
            b->p = f_malloc(sz);
            w->n_malloc++;
            if (!b->p) fail(w, "malloc");
        } else {
            b->p = f_calloc(sz / 16, 16);
            w->n_calloc++;
            if (!b->p) fail(w, "calloc");
            if (load64(b->p) || load64(b->p + sz - 8) || b->p[sz / 2]) w->errors++;
        }
        put_tags(b);
        return;
    }
    if (kind < 10) {
        release(w, b);
    } else if (kind < 16) {
        size_t old = b->size, sz = pick_size(r);
        if (sz < 16) sz = 16;
        unsigned char *n = f_realloc(b->p, sz);
        w->n_realloc++;
        if (!n) fail(w, "realloc");
        b->p = n;
        if (load64(n) != b->tag) w->errors++;
        if (sz >= old && load64(n + old - 8) != ~b->tag) w->errors++;
        b->size = sz;
        put_tags(b);
    } else {
        shared_slot_t *s = &shared[r % SHARED_SLOTS];
        pthread_mutex_lock(&s->mu);
        block_t out = s->b;
        s->b = *b;
        pthread_mutex_unlock(&s->mu);
        b->p = NULL;
        if (out.p) release(w, &out);
    }
}

static void *work(void *arg)
{
    worker_t *w = arg;
    uint64_t rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(w->index + 1);
    ps_begin("counted", (uint64_t)w->index, NULL, 0);
    for (long i = 0; i < w->ops; i++) op(w, &rng, i);
    for (int k = 0; k < LOCAL_SLOTS; k++)
        if (w->slot[k].p) release(w, &w->slot[k]);
    ps_end("counted", (uint64_t)w->index);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 8, opt;
    long ops = 1000000;
    while ((opt = getopt(argc, argv, "t:n:")) != -1) {
        switch (opt) {
        case 't': threads = atoi(optarg); break;
        case 'n': ops = atol(optarg); break;
        default:
            fprintf(stderr, "usage: stress [-t THREADS] [-n OPS]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > MAX_THREADS || ops < 1) {
        fprintf(stderr, "stress: bad -t/-n\n");
        return 2;
    }
    for (int k = 0; k < SHARED_SLOTS; k++) pthread_mutex_init(&shared[k].mu, NULL);

    /* +1: the main thread's cleanup is accounted as one more worker */
    worker_t *w = f_calloc((size_t)threads + 1, sizeof *w);
    if (!w) { perror("stress"); return 1; }
    pthread_t t[MAX_THREADS];
    for (int k = 0; k <= threads; k++) {
        w[k].index = k;
        w[k].ops = ops;
    }
    for (int k = 0; k < threads; k++) {
        int e = pthread_create(&t[k], NULL, work, &w[k]);
        if (e) { fprintf(stderr, "stress: pthread_create: %s\n", strerror(e)); return 1; }
    }
    for (int k = 0; k < threads; k++) pthread_join(t[k], NULL);

    worker_t *m = &w[threads];
    ps_begin("counted", (uint64_t)threads, NULL, 0);
    for (int k = 0; k < SHARED_SLOTS; k++)
        if (shared[k].b.p) release(m, &shared[k].b);
    ps_end("counted", (uint64_t)threads);

    unsigned long n_malloc = 0, n_calloc = 0, n_realloc = 0, n_free = 0, cross = 0, errors = 0;
    uint64_t sum = 0;
    for (int k = 0; k <= threads; k++) {
        n_malloc += w[k].n_malloc; n_calloc += w[k].n_calloc; n_realloc += w[k].n_realloc;
        n_free += w[k].n_free; cross += w[k].cross; errors += w[k].errors;
        sum += w[k].sum;
    }
    if (n_free != n_malloc + n_calloc) errors++;   /* every block freed exactly once */
    /* sorted by key, as pstdump prints them */
    printf("calloc=%lu\nfree=%lu\nmalloc=%lu\nrealloc=%lu\n", n_calloc, n_free, n_malloc, n_realloc);
    printf("ops=%ld\nerrors=%lu\nchecksum=%016llx\n", ops * threads, errors, (unsigned long long)sum);
    fprintf(stderr, "cross_thread_frees=%lu\n", cross);
    f_free(w);
    return errors ? 1 : 0;
}
