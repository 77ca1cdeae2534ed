/* sql_truth.c — heap objects whose story is known from this source, for
 * tests/integration/sql_schema.sh to check `poolscope sql`'s allocations
 * row by row.
 *
 *   sql_truth            prints one line per object (write(2), no stdio
 *                        buffer of its own), then exits:
 *   obj NAME call=CALL size=N addr=A tid=T free_tid=F usable=U [old=A] [arg=N]
 *
 * Objects (sizes chosen so that no library allocation shares them):
 *   same_thread   malloc(1001), freed by the main thread
 *   worker_alloc  malloc(2002) on the worker thread, freed by main after the join
 *   main_alloc    malloc(3003) by main, freed by the worker (a cross-thread free)
 *   realloc_src   malloc(303), then realloc'd to 5005 (freed by that realloc)
 *   realloc_dst   the realloc's block (5005), freed by main; old = realloc_src
 *   leak          malloc(777), never freed (free_tid=0)
 *   calloc        calloc(7, 13): 91 bytes, arg=7
 *   aligned       posix_memalign(64, 4099), arg=64
 *   large         malloc(200003): an mmap'd chunk, page-rounded
 * usable is malloc_usable_size() of the block (glibc's granted bytes);
 * free_tid 0 means never freed; F is the freeing thread's kernel tid.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *volatile keep;          /* the leak stays reachable from the source's point of view only */
static void *main_block, *worker_block;
static long worker_tid;

static long tid_now(void) { return (long)syscall(SYS_gettid); }

static void line(const char *name, const char *call, size_t size, uintptr_t p, long tid, long free_tid,
                 size_t usable, const char *extra)
{
    char buf[300];
    int n = snprintf(buf, sizeof buf, "obj %s call=%s size=%zu addr=%llu tid=%ld free_tid=%ld usable=%zu%s\n", name,
                     call, size, (unsigned long long)p, tid, free_tid, usable, extra ? extra : "");
    if (n > 0 && write(1, buf, (size_t)n) != n) _exit(1);
}

static void *worker(void *arg)
{
    (void)arg;
    worker_tid = tid_now();
    worker_block = malloc(2002);
    if (!worker_block) _exit(1);
    free(main_block);                /* allocated by main */
    return NULL;
}

int main(void)
{
    long me = tid_now();
    char extra[80];

    void *a = malloc(1001);
    if (!a) return 1;
    size_t ua = malloc_usable_size(a);
    uintptr_t aa = (uintptr_t)a;
    free(a);
    line("same_thread", "malloc", 1001, aa, me, me, ua, NULL);

    main_block = malloc(3003);
    if (!main_block) return 1;
    uintptr_t mb = (uintptr_t)main_block;
    size_t umb = malloc_usable_size(main_block);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) || pthread_join(t, NULL)) return 1;
    size_t uwb = malloc_usable_size(worker_block);
    uintptr_t wb = (uintptr_t)worker_block;
    free(worker_block);
    line("main_alloc", "malloc", 3003, mb, me, worker_tid, umb, NULL);
    line("worker_alloc", "malloc", 2002, wb, worker_tid, me, uwb, NULL);

    void *r = malloc(303);
    if (!r) return 1;
    size_t ur = malloc_usable_size(r);
    uintptr_t ra = (uintptr_t)r;
    void *r2 = realloc(r, 5005);
    if (!r2) return 1;
    size_t ur2 = malloc_usable_size(r2);
    uintptr_t r2a = (uintptr_t)r2;
    free(r2);
    line("realloc_src", "malloc", 303, ra, me, me, ur, NULL);
    snprintf(extra, sizeof extra, " old=%llu", (unsigned long long)ra);
    line("realloc_dst", "realloc", 5005, r2a, me, me, ur2, extra);

    keep = malloc(777);
    if (!keep) return 1;
    line("leak", "malloc", 777, (uintptr_t)keep, me, 0, malloc_usable_size(keep), NULL);

    void *c = calloc(7, 13);
    if (!c) return 1;
    size_t uc = malloc_usable_size(c);
    uintptr_t ca = (uintptr_t)c;
    free(c);
    line("calloc", "calloc", 91, ca, me, me, uc, " arg=7");

    void *m = NULL;
    if (posix_memalign(&m, 64, 4099)) return 1;
    size_t um = malloc_usable_size(m);
    uintptr_t ma = (uintptr_t)m;
    free(m);
    line("aligned", "posix_memalign", 4099, ma, me, me, um, " arg=64");

    void *big = malloc(200003);
    if (!big) return 1;
    size_t ub = malloc_usable_size(big);
    uintptr_t ba = (uintptr_t)big;
    free(big);
    line("large", "malloc", 200003, ba, me, me, ub, NULL);
    return 0;
}
