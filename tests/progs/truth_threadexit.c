/* truth_threadexit.c — frees made while a thread ends, after the tracer's
 * own thread-exit hook has run: the destructor of a pthread key created by
 * the program (glibc runs key destructors in creation order, and the
 * tracer's key is made before main) frees what the thread kept in it, as
 * glibc itself frees a thread's dynamic TLS at that point. Every block is
 * counted by the program, so a tracer that drops those frees shows them as
 * leaks (and lost events).
 *
 *   truth_threadexit THREADS BLOCKS
 *
 * Each thread allocates BLOCKS blocks into a list held by the key and one
 * more it never frees; threads run one after another. main first holds one
 * 4 MiB block alone, so the peak is that block whatever glibc itself holds
 * for a running thread. (Nothing but time orders that free before the
 * threads' first events: the tracer moves its tick to the clock's time at
 * pthread_create, FORMAT.md "Time".) Prints allocs, frees, leaked_objects,
 * leaked_bytes, peak_live_bytes.
 */
#include "truth_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct node { struct node *next; size_t size; } node_t;

static pthread_key_t key;
static atomic_uint_fast64_t live, peak, n_alloc, n_free, leaked_bytes;
static unsigned blocks;

static void count_alloc(size_t n)
{
    uint64_t now = atomic_fetch_add(&live, n) + n, p = atomic_load(&peak);
    while (now > p && !atomic_compare_exchange_weak(&peak, &p, now)) {}
    atomic_fetch_add(&n_alloc, 1);
}

static void drop_list(void *v)
{
    for (node_t *n = v, *next; n; n = next) {
        next = n->next;
        atomic_fetch_sub(&live, n->size);
        atomic_fetch_add(&n_free, 1);
        free(n);
    }
}

static void *worker(void *arg)
{
    uint64_t seed = (uintptr_t)arg * 2654435761u + 1;
    node_t *head = NULL;
    for (unsigned i = 0; i < blocks; i++) {
        size_t sz = sizeof(node_t) + next_rand(&seed) % 2000;
        node_t *n = malloc(sz);
        if (!n) die("malloc\n");
        count_alloc(sz);
        n->size = sz;
        n->next = head;
        head = n;
    }
    size_t lsz = 100 + (uintptr_t)arg;
    void *leak = malloc(lsz);   /* never freed */
    if (!leak) die("malloc\n");
    count_alloc(lsz);
    atomic_fetch_add(&leaked_bytes, lsz);
    pthread_setspecific(key, head);
    return leak;
}

int main(int argc, char **argv)
{
    if (argc != 3) die("usage: truth_threadexit THREADS BLOCKS\n");
    unsigned threads = (unsigned)atoi(argv[1]);
    blocks = (unsigned)atoi(argv[2]);
    if (pthread_key_create(&key, drop_list)) die("pthread_key_create\n");
    void *big = malloc(4u << 20);
    if (!big) die("malloc\n");
    count_alloc(4u << 20);
    atomic_fetch_sub(&live, 4u << 20);
    atomic_fetch_add(&n_free, 1);
    free(big);
    for (unsigned i = 0; i < threads; i++) {
        pthread_t th;
        if (pthread_create(&th, NULL, worker, (void *)(uintptr_t)i) || pthread_join(th, NULL))
            die("thread\n");
    }
    put("allocs", atomic_load(&n_alloc));
    put("frees", atomic_load(&n_free));
    put("leaked_objects", threads);
    put("leaked_bytes", atomic_load(&leaked_bytes));
    put("peak_live_bytes", atomic_load(&peak));
    put("cross_thread_frees", 0);
    return 0;
}
