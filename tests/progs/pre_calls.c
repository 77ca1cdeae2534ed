/* pre_calls — a known number of each hooked call, single- or multi-threaded.
 *
 *   pre_calls ITER THREADS EXPECTED_FILE
 *
 * Every thread runs ITER rounds of malloc, calloc, realloc, reallocarray,
 * posix_memalign, aligned_alloc, memalign, valloc, pvalloc, free, mmap,
 * mremap, madvise(DONTNEED), munmap plus the edge cases (realloc(NULL),
 * realloc(p, 0), failing malloc/calloc/posix_memalign) inside a
 * MARK_BEGIN/END "calls" scope, logs what it did into a preallocated buffer
 * and writes EXPECTED_FILE afterwards in the format of `pre_dump -w calls`.
 * `sort` both and diff: the trace must hold exactly these events.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "poolscope/poolscope.h"

#define LINE 96
static int iters;
static void *volatile nullp;   /* keeps gcc from turning realloc(NULL, n) into malloc(n) */
static char *logbuf;
static size_t per_thread;

typedef struct { int idx; size_t n; char *buf; } th_t;

#define LOG(...) do { snprintf(th->buf + th->n * LINE, LINE, __VA_ARGS__); th->n++; } while (0)
#define A(p) ((uint64_t)(uintptr_t)(p))

static void *run(void *arg)
{
    th_t *th = arg;
    ps_begin("calls", (uint64_t)th->idx, NULL, 0);
    for (int i = 0; i < iters; i++) {
        size_t s1 = 1000 + (size_t)(i % 50);
        void *p = malloc(s1);                 LOG("malloc 0x%" PRIx64 " %zu", A(p), s1);
        void *c = calloc(3, 100 + (size_t)(i % 7)); LOG("calloc 0x%" PRIx64 " 3 %zu", A(c), 100 + (size_t)(i % 7));
        void *r = realloc(p, 2000 + (size_t)(i % 13));
        LOG("realloc 0x%" PRIx64 " 0x%" PRIx64 " %zu", A(p), A(r), 2000 + (size_t)(i % 13));
        void *ra = reallocarray(NULL, 5, 24); LOG("reallocarray 0x0 0x%" PRIx64 " 5 24", A(ra));
        void *pm = NULL;
        int rc = posix_memalign(&pm, 64, 300);
        LOG("posix_memalign 0x%" PRIx64 " 64 300", rc == 0 ? A(pm) : 0);
        void *aa = aligned_alloc(128, 256);   LOG("aligned_alloc 0x%" PRIx64 " 128 256", A(aa));
        void *ma = memalign(32, 200);         LOG("memalign 0x%" PRIx64 " 32 200", A(ma));
        void *va = valloc(100);               LOG("valloc 0x%" PRIx64 " 100", A(va));
        void *pv = pvalloc(100);              LOG("pvalloc 0x%" PRIx64 " 100", A(pv));
        void *rn = realloc(nullp, 64);        LOG("realloc 0x0 0x%" PRIx64 " 64", A(rn));
        void *r0 = realloc(rn, 0);            LOG("realloc 0x%" PRIx64 " 0x%" PRIx64 " 0", A(rn), A(r0));
        free(NULL);
        free(r);  LOG("free 0x%" PRIx64, A(r));
        free(c);  LOG("free 0x%" PRIx64, A(c));
        free(ra); LOG("free 0x%" PRIx64, A(ra));
        free(pm); LOG("free 0x%" PRIx64, A(pm));
        free(aa); LOG("free 0x%" PRIx64, A(aa));
        free(ma); LOG("free 0x%" PRIx64, A(ma));
        free(va); LOG("free 0x%" PRIx64, A(va));
        free(pv); LOG("free 0x%" PRIx64, A(pv));
        if (i % 10 == 0) {
            static volatile size_t bigv = (size_t)1 << 62;
            size_t big = bigv;
            void *f1 = malloc(big);           LOG("malloc 0x%" PRIx64 " %zu", A(f1), big);
            void *f2 = calloc(big, 16);       LOG("calloc 0x%" PRIx64 " %zu 16", A(f2), big);
            void *f3 = NULL;
            int e = posix_memalign(&f3, 3, 10); LOG("posix_memalign 0x%" PRIx64 " 3 10", e == 0 ? A(f3) : 0);
            size_t ps = 4096;
            void *m = mmap(NULL, 4 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            LOG("mmap 0x%" PRIx64 " %zu 3 34 -1 0", A(m), 4 * ps);
            memset(m, 1, 4 * ps);
            madvise(m, ps, MADV_DONTNEED);    LOG("madvise 0x%" PRIx64 " %zu 4", A(m), ps);
            madvise(m, ps, MADV_WILLNEED);    /* not recorded */
            void *m2 = mremap(m, 4 * ps, 8 * ps, MREMAP_MAYMOVE);
            LOG("mremap 0x%" PRIx64 " %zu 0x%" PRIx64 " %zu 1", A(m), 4 * ps, A(m2), 8 * ps);
            munmap(m2, 8 * ps);               LOG("munmap 0x%" PRIx64 " %zu", A(m2), 8 * ps);
        }
    }
    ps_end("calls", (uint64_t)th->idx);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: pre_calls ITER THREADS EXPECTED\n"); return 2; }
    iters = atoi(argv[1]);
    int nth = atoi(argv[2]);
    per_thread = (size_t)iters * 30 + 16;
    logbuf = malloc((size_t)nth * per_thread * LINE);
    th_t *th = calloc((size_t)nth, sizeof *th);
    pthread_t *tid = calloc((size_t)nth, sizeof *tid);
    if (!logbuf || !th || !tid) return 1;
    for (int k = 0; k < nth; k++) { th[k].idx = k; th[k].buf = logbuf + (size_t)k * per_thread * LINE; }
    if (nth == 1) run(&th[0]);
    else {
        for (int k = 0; k < nth; k++) pthread_create(&tid[k], NULL, run, &th[k]);
        for (int k = 0; k < nth; k++) pthread_join(tid[k], NULL);
    }
    FILE *f = fopen(argv[3], "w");
    if (!f) return 1;
    for (int k = 0; k < nth; k++)
        for (size_t j = 0; j < th[k].n; j++) fprintf(f, "%s\n", th[k].buf + j * LINE);
    fclose(f);
    free(logbuf); free(th); free(tid);
    return 0;
}
