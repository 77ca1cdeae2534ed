/* alloc_counts.c — makes a known number of every hooked call and prints
 * its own counts, so a test can compare them exactly with a trace.
 *
 *   alloc_counts [-n ROUNDS] [-t THREADS] [-d DIR]
 *
 * Each worker (the main thread, or each of THREADS threads) brackets its
 * calls with the markers begin/end "counted" (instance = worker index), so
 * `pstdump --scope counted` counts only these calls, in that thread's
 * stream, whatever the runtime does around them. The counts are printed
 * afterwards as key=value lines in pstdump's names (sorted), e.g.
 * "malloc=4000". free(NULL) is called but not counted (the tracer does not
 * record it), nor is madvise(MADV_WILLNEED) (only advices that drop pages
 * are recorded). DIR (default /tmp) holds the file mapped by the
 * file-backed mmaps.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "poolscope/poolscope.h"

/* Declared by glibc only under some feature sets. */
extern void *pvalloc(size_t size);

typedef struct counts {
    unsigned long malloc_, calloc_, realloc_, reallocarray_, free_, posix_memalign_,
        aligned_alloc_, memalign_, valloc_, pvalloc_, mmap_anon, mmap_file, munmap_,
        mremap_, madvise_, brk_, sbrk_;
} counts_t;

static int rounds = 1000;
static int map_fd = -1;

/* Every call goes through a volatile function pointer: otherwise gcc folds
 * realloc(NULL, n) into malloc(n) and drops unused allocate/free pairs,
 * and the program would not make the calls it counts. */
static void *(*volatile f_malloc)(size_t) = malloc;
static void *(*volatile f_calloc)(size_t, size_t) = calloc;
static void *(*volatile f_realloc)(void *, size_t) = realloc;
static void *(*volatile f_reallocarray)(void *, size_t, size_t) = reallocarray;
static void (*volatile f_free)(void *) = free;
static int (*volatile f_posix_memalign)(void **, size_t, size_t) = posix_memalign;
static void *(*volatile f_aligned_alloc)(size_t, size_t) = aligned_alloc;
static void *(*volatile f_memalign)(size_t, size_t) = memalign;
static void *(*volatile f_valloc)(size_t) = valloc;
static void *(*volatile f_pvalloc)(size_t) = pvalloc;
#define malloc f_malloc
#define calloc f_calloc
#define realloc f_realloc
#define reallocarray f_reallocarray
#define free f_free
#define posix_memalign f_posix_memalign
#define aligned_alloc f_aligned_alloc
#define memalign f_memalign
#define valloc f_valloc
#define pvalloc f_pvalloc

static void *volatile sink;

static void die(const char *what)
{
    fprintf(stderr, "alloc_counts: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void one_round(counts_t *c, int i)
{
    size_t sz = 16 + (size_t)(i % 61) * 8;

    void *a = malloc(sz); c->malloc_++;
    void *z = malloc(0); c->malloc_++;
    void *b = calloc(4, sz); c->calloc_++;
    a = realloc(a, sz * 3); c->realloc_++;               /* grow */
    void *r0 = realloc(NULL, sz); c->realloc_++;         /* = malloc */
    void *r1 = malloc(32); c->malloc_++;
    r1 = realloc(r1, 0); c->realloc_++;                  /* = free, returns NULL */
    void *ra = reallocarray(NULL, 3, sz); c->reallocarray_++;
    ra = reallocarray(ra, 5, sz); c->reallocarray_++;
    void *pm = NULL;
    if (posix_memalign(&pm, 64, sz)) die("posix_memalign");
    c->posix_memalign_++;
    void *al = aligned_alloc(128, 256); c->aligned_alloc_++;
    void *ma = memalign(32, sz); c->memalign_++;
    void *va = valloc(100); c->valloc_++;
    void *pv = pvalloc(100); c->pvalloc_++;
    sink = a; sink = z; sink = b; sink = r0; sink = r1;

    free(a); free(z); free(b); free(r0); free(ra); free(pm); free(al); free(ma); free(va); free(pv);
    c->free_ += 10;
    if (r1) { free(r1); c->free_++; }   /* glibc returns NULL; be exact anyway */
    free(NULL);                          /* not recorded */

    if (i % 10 == 0) {
        long pg = sysconf(_SC_PAGESIZE);
        char *m = mmap(NULL, (size_t)pg * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) die("mmap");
        c->mmap_anon++;
        memset(m, 1, (size_t)pg * 4);
        if (madvise(m, (size_t)pg, MADV_DONTNEED)) die("madvise");
        c->madvise_++;
        if (madvise(m, (size_t)pg, MADV_WILLNEED)) die("madvise");   /* not recorded */
        char *m2 = mremap(m, (size_t)pg * 4, (size_t)pg * 8, MREMAP_MAYMOVE);
        if (m2 == MAP_FAILED) die("mremap");
        c->mremap_++;
        if (munmap(m2, (size_t)pg * 8)) die("munmap");
        c->munmap_++;

        char *f = mmap(NULL, (size_t)pg, PROT_READ, MAP_SHARED, map_fd, 0);
        if (f == MAP_FAILED) die("mmap file");
        c->mmap_file++;
        sink = f;
        if (munmap(f, (size_t)pg)) die("munmap");
        c->munmap_++;

        void *cur = sbrk(0); c->sbrk_++;
        if (cur != (void *)-1) {
            if (brk(cur)) die("brk");
            c->brk_++;
        }
    }
}

typedef struct worker { int index; counts_t c; } worker_t;

static void *work(void *arg)
{
    worker_t *w = arg;
    ps_begin("counted", (uint64_t)w->index, NULL, 0);
    for (int i = 0; i < rounds; i++) one_round(&w->c, i);
    ps_end("counted", (uint64_t)w->index);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 0, opt;
    const char *dir = "/tmp";
    while ((opt = getopt(argc, argv, "n:t:d:")) != -1) {
        switch (opt) {
        case 'n': rounds = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'd': dir = optarg; break;
        default:
            fprintf(stderr, "usage: alloc_counts [-n ROUNDS] [-t THREADS] [-d DIR]\n");
            return 2;
        }
    }
    if (rounds < 1 || threads < 0 || threads > 64) { fprintf(stderr, "alloc_counts: bad -n/-t\n"); return 2; }

    char path[4096];
    snprintf(path, sizeof path, "%s/alloc_counts.%ld.map", dir, (long)getpid());
    map_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (map_fd < 0) die(path);
    if (ftruncate(map_fd, sysconf(_SC_PAGESIZE))) die("ftruncate");
    unlink(path);

    int n = threads ? threads : 1;
    worker_t w[64];
    memset(w, 0, sizeof w);
    if (!threads) {
        w[0].index = 0;
        work(&w[0]);
    } else {
        pthread_t t[64];
        for (int i = 0; i < n; i++) {
            w[i].index = i;
            if (pthread_create(&t[i], NULL, work, &w[i])) die("pthread_create");
        }
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    }
    counts_t s = { 0 };
    for (int i = 0; i < n; i++) {
        s.malloc_ += w[i].c.malloc_; s.calloc_ += w[i].c.calloc_; s.realloc_ += w[i].c.realloc_;
        s.reallocarray_ += w[i].c.reallocarray_; s.free_ += w[i].c.free_;
        s.posix_memalign_ += w[i].c.posix_memalign_; s.aligned_alloc_ += w[i].c.aligned_alloc_;
        s.memalign_ += w[i].c.memalign_; s.valloc_ += w[i].c.valloc_; s.pvalloc_ += w[i].c.pvalloc_;
        s.mmap_anon += w[i].c.mmap_anon; s.mmap_file += w[i].c.mmap_file;
        s.munmap_ += w[i].c.munmap_; s.mremap_ += w[i].c.mremap_; s.madvise_ += w[i].c.madvise_;
        s.brk_ += w[i].c.brk_; s.sbrk_ += w[i].c.sbrk_;
    }
    close(map_fd);
    /* sorted by key, as pstdump prints them */
    printf("aligned_alloc=%lu\nbrk=%lu\ncalloc=%lu\nfree=%lu\nmadvise=%lu\nmalloc=%lu\n"
           "memalign=%lu\nmmap_anon=%lu\nmmap_file=%lu\nmremap=%lu\nmunmap=%lu\n"
           "posix_memalign=%lu\npvalloc=%lu\nrealloc=%lu\nreallocarray=%lu\nsbrk=%lu\nvalloc=%lu\n",
           s.aligned_alloc_, s.brk_, s.calloc_, s.free_, s.madvise_, s.malloc_, s.memalign_,
           s.mmap_anon, s.mmap_file, s.mremap_, s.munmap_, s.posix_memalign_, s.pvalloc_,
           s.realloc_, s.reallocarray_, s.sbrk_, s.valloc_);
    return 0;
}
