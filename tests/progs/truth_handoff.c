/* truth_handoff.c — producer/consumer threads that free on another thread
 * than the one that allocated, with the program's own exact count of what
 * it allocated, freed, leaked and held at its peak: the independent figure a
 * trace's report must reproduce.
 *
 *   truth_handoff N M PER_PRODUCER LEAK_EVERY
 *       N producer threads each malloc PER_PRODUCER objects of 16..4096
 *       bytes (sizes from a per-producer xorshift generator, so the same on
 *       every run) and push them through one mutex+condvar queue of 64
 *       slots to M consumer threads, which free them. Object i of a
 *       producer (counting from 1) with i % LEAK_EVERY == 0 is kept by the
 *       consumer that pops it and never freed (LEAK_EVERY 0: no leaks).
 *
 *   truth_handoff churn T OPS HANDOFF_PERMILLE LEAK_EVERY
 *       T threads (started together at a barrier) each make OPS operations
 *       over 64 private slots: an empty slot gets a malloc of 16..4096
 *       bytes; a full one is freed, or (with probability
 *       HANDOFF_PERMILLE/1000) handed to the next thread's inbox, after
 *       which the thread frees one block from its own inbox if there is one
 *       (the previous thread's: a cross-thread free). Every LEAK_EVERY-th
 *       malloc of a thread is kept and never freed. At the end each thread
 *       frees its slots and the main thread frees what is left in the
 *       inboxes. So about HANDOFF_PERMILLE/1000 of the frees are
 *       cross-thread, and every count printed but cross_thread_frees is the
 *       same on every run.
 *
 *   truth_handoff N M PER_PRODUCER LEAK_EVERY noburst
 *       the same without the burst (below): peak_live_bytes is then the
 *       program's own highest count of its live bytes while its threads
 *       ran, which depends on how they interleaved. Each malloc is counted
 *       after it returned and each free before it was called, so that count
 *       never passes what was really live: a lower bound a trace's peak
 *       must reach (FORMAT.md, "Ties").
 *
 * The peak. The program keeps its live bytes in an atomic counter (added
 * after each malloc, subtracted before each free) and its maximum with a
 * CAS loop after each malloc. So that this figure does not depend on how
 * the threads interleaved (nor on which of two events a few nanoseconds
 * apart a trace puts first), the peak is made by construction: after every
 * thread is joined and 50 ms have passed, the main thread mallocs a burst
 * of more bytes than the whole threaded phase allocated together (blocks of
 * 4 MiB, untouched), and frees it 50 ms later. The peak is then exactly
 * leaked_bytes + burst_bytes, whatever the interleaving; the program checks
 * that its CAS maximum says the same and exits 1 if not. A trace whose
 * merge lost the pairing of a free with its allocation shows the orphaned
 * objects as live at the burst, so its peak is higher.
 *
 * No libc call made here allocates except pthread_create (glibc callocs
 * each new thread's DTV, and frees it when the stack leaves its cache: run
 * with GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0 to have them freed
 * at join, so they are neither leaked nor live at the burst). Output goes
 * through write(2) from a stack buffer: stdio would malloc its buffer.
 *
 * Prints, one key=value a line: allocs (malloc calls), frees, leaked_objects,
 * leaked_bytes (requested sizes), peak_live_bytes, then threads (created),
 * streamed_bytes (bytes malloc'd by the threads), burst_bytes, burst_allocs,
 * cross_thread_frees (frees of a block another thread allocated; timing-
 * dependent in churn mode, all consumer frees in handoff mode).
 * Exit 0; 1 on an allocation failure or a failed self-check; 2 bad usage.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "truth_util.h"

#define QCAP 64
#define MAX_THREADS 64
#define MIN_SIZE 16
#define MAX_SIZE 4096
#define BURST_BLOCK ((size_t)4 << 20)
#define LOCAL_SLOTS 64

/* Through volatile pointers: the compiler must make every call counted. */
static void *(*volatile f_malloc)(size_t) = malloc;
static void (*volatile f_free)(void *) = free;

typedef struct obj {
    uint32_t size;            /* requested bytes */
    uint16_t owner;           /* allocating thread */
    uint8_t leak;             /* to be kept by whoever gets it */
    uint8_t pad;
    struct obj *next;         /* kept list */
} obj_t;                      /* 16 bytes: fits the smallest object */

static atomic_uint_fast64_t live_bytes, peak_bytes;
static atomic_uint_fast64_t n_allocs, n_frees, n_leaked, leaked_bytes, n_cross, streamed;




static uint32_t rand_size(uint64_t *s)
{
    return MIN_SIZE + (uint32_t)(next_rand(s) % (MAX_SIZE - MIN_SIZE + 1));
}

/* after a malloc of n bytes */
static void note_alloc(uint64_t n)
{
    uint64_t now = atomic_fetch_add(&live_bytes, n) + n;
    uint64_t pk = atomic_load(&peak_bytes);
    while (now > pk && !atomic_compare_exchange_weak(&peak_bytes, &pk, now)) { }
    atomic_fetch_add(&n_allocs, 1);
}

/* before a free of n bytes */
static void note_free(uint64_t n)
{
    atomic_fetch_sub(&live_bytes, n);
    atomic_fetch_add(&n_frees, 1);
}

static obj_t *new_obj(uint32_t size, int owner, int leak)
{
    obj_t *o = f_malloc(size);
    if (!o) die("truth_handoff: out of memory\n");
    note_alloc(size);
    atomic_fetch_add(&streamed, size);
    o->size = size;
    o->owner = (uint16_t)owner;
    o->leak = (uint8_t)leak;
    o->next = NULL;
    return o;
}

static void free_obj(obj_t *o, int self)
{
    if (o->owner != self) atomic_fetch_add(&n_cross, 1);
    note_free(o->size);
    f_free(o);
}

static void keep_obj(obj_t *o, obj_t **kept)
{
    o->next = *kept;
    *kept = o;
    atomic_fetch_add(&n_leaked, 1);
    atomic_fetch_add(&leaked_bytes, o->size);
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) { }
}

/* ---- handoff mode ---------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    obj_t *ring[QCAP];
    unsigned head, count;
    int producers_left;
} q = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
        { 0 }, 0, 0, 0 };

static long per_producer, leak_every;

static void q_push(obj_t *o)
{
    pthread_mutex_lock(&q.mu);
    while (q.count == QCAP) pthread_cond_wait(&q.not_full, &q.mu);
    q.ring[(q.head + q.count) % QCAP] = o;
    q.count++;
    pthread_cond_signal(&q.not_empty);
    pthread_mutex_unlock(&q.mu);
}

/* NULL when the producers are done and the queue is empty */
static obj_t *q_pop(void)
{
    pthread_mutex_lock(&q.mu);
    while (q.count == 0 && q.producers_left > 0) pthread_cond_wait(&q.not_empty, &q.mu);
    obj_t *o = NULL;
    if (q.count) {
        o = q.ring[q.head];
        q.head = (q.head + 1) % QCAP;
        q.count--;
        pthread_cond_signal(&q.not_full);
    }
    pthread_mutex_unlock(&q.mu);
    return o;
}

static void *producer(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
    for (long i = 1; i <= per_producer; i++) {
        int leak = leak_every > 0 && i % leak_every == 0;
        q_push(new_obj(rand_size(&s), id, leak));
    }
    pthread_mutex_lock(&q.mu);
    if (--q.producers_left == 0) pthread_cond_broadcast(&q.not_empty);
    pthread_mutex_unlock(&q.mu);
    return NULL;
}

static void *consumer(void *arg)
{
    int id = (int)(intptr_t)arg;
    obj_t *kept = NULL, *o;
    while ((o = q_pop())) {
        if (o->leak) keep_obj(o, &kept);
        else free_obj(o, id);
    }
    return NULL;          /* `kept` is dropped: the leak is on purpose */
}

/* ---- churn mode ------------------------------------------------------------ */

/* inbox[i]: blocks handed to thread i by thread i-1, an intrusive list under
 * a mutex (a handoff always succeeds, so each thread's sequence of calls
 * does not depend on timing; only who frees a handed-off block does) */
static struct {
    pthread_mutex_t mu;
    obj_t *head;
} inbox[MAX_THREADS];
static long churn_ops, handoff_permille;
static int n_churners;
static pthread_barrier_t start_line;

static void *churner(void *arg)
{
    int id = (int)(intptr_t)arg, me = id - 1, next = id % n_churners;
    uint64_t s = 0xD1B54A32D192ED03ull * (uint64_t)id;
    obj_t *slot[LOCAL_SLOTS] = { 0 }, *kept = NULL;
    long mallocs = 0;
    pthread_barrier_wait(&start_line);
    for (long op = 0; op < churn_ops; op++) {
        uint64_t r = next_rand(&s);
        unsigned j = (unsigned)(r % LOCAL_SLOTS);
        if (!slot[j]) {
            mallocs++;
            obj_t *o = new_obj(rand_size(&s), id, 0);
            if (leak_every > 0 && mallocs % leak_every == 0) keep_obj(o, &kept);
            else slot[j] = o;
        } else if ((long)((r >> 32) % 1000) < handoff_permille) {
            obj_t *o = slot[j];
            slot[j] = NULL;
            pthread_mutex_lock(&inbox[next].mu);
            o->next = inbox[next].head;
            inbox[next].head = o;
            pthread_mutex_unlock(&inbox[next].mu);
            pthread_mutex_lock(&inbox[me].mu);
            obj_t *in = inbox[me].head;
            if (in) inbox[me].head = in->next;
            pthread_mutex_unlock(&inbox[me].mu);
            if (in) free_obj(in, id);
        } else {
            free_obj(slot[j], id);
            slot[j] = NULL;
        }
    }
    for (unsigned j = 0; j < LOCAL_SLOTS; j++)
        if (slot[j]) free_obj(slot[j], id);
    return NULL;
}

/* ---- main ------------------------------------------------------------------ */

static void usage(void)
{
    die("usage: truth_handoff N M PER_PRODUCER LEAK_EVERY [noburst]\n"
        "       truth_handoff churn T OPS HANDOFF_PERMILLE LEAK_EVERY\n");
}

static long arg_num(const char *s, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) usage();
    return v;
}

int main(int argc, char **argv)
{
    pthread_t th[MAX_THREADS];
    int nth = 0;
    int churn = argc > 1 && !strcmp(argv[1], "churn");
    int noburst = !churn && argc == 6 && !strcmp(argv[5], "noburst");
    if (churn) {
        if (argc != 6) usage();
        int t = (int)arg_num(argv[2], 1, MAX_THREADS);
        churn_ops = arg_num(argv[3], 0, 1L << 40);
        handoff_permille = arg_num(argv[4], 0, 1000);
        leak_every = arg_num(argv[5], 0, 1L << 40);
        n_churners = t;
        for (int k = 0; k < t; k++) pthread_mutex_init(&inbox[k].mu, NULL);
        pthread_barrier_init(&start_line, NULL, (unsigned)t);
        for (int i = 0; i < t; i++)
            if (pthread_create(&th[nth++], NULL, churner, (void *)(intptr_t)(i + 1)))
                die("truth_handoff: pthread_create failed\n");
    } else {
        if (argc != 5 + noburst) usage();
        int n = (int)arg_num(argv[1], 1, MAX_THREADS / 2);
        int m = (int)arg_num(argv[2], 1, MAX_THREADS / 2);
        per_producer = arg_num(argv[3], 0, 1L << 40);
        leak_every = arg_num(argv[4], 0, 1L << 40);
        q.producers_left = n;
        /* producers are threads 1..n, consumers n+1..n+m: owner ids differ */
        for (int i = 0; i < m; i++)
            if (pthread_create(&th[nth++], NULL, consumer, (void *)(intptr_t)(n + 1 + i)))
                die("truth_handoff: pthread_create failed\n");
        for (int i = 0; i < n; i++)
            if (pthread_create(&th[nth++], NULL, producer, (void *)(intptr_t)(i + 1)))
                die("truth_handoff: pthread_create failed\n");
    }
    for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
    if (churn)   /* what is left in the inboxes: freed by main (id 0) */
        for (int k = 0; k < n_churners; k++)
            for (obj_t *o = inbox[k].head, *nx; o; o = nx) { nx = o->next; free_obj(o, 0); }

    /* the burst: more than the threaded phase allocated in all, well apart
     * in time from it, on one thread */
    sleep_ms(50);
    uint64_t stream_total = atomic_load(&streamed);
    uint64_t burst_target = noburst ? 0 : stream_total + ((uint64_t)1 << 20), burst = 0;
    void *blk[4096];
    size_t bsz[4096], nb = 0;
    while (burst < burst_target && nb < sizeof blk / sizeof blk[0]) {
        size_t sz = burst_target - burst < BURST_BLOCK ? (size_t)(burst_target - burst) : BURST_BLOCK;
        if (sz < MIN_SIZE) sz = MIN_SIZE;
        blk[nb] = f_malloc(sz);
        if (!blk[nb]) die("truth_handoff: out of memory (burst)\n");
        note_alloc(sz);
        bsz[nb++] = sz;
        burst += sz;
    }
    if (burst < burst_target) die("truth_handoff: burst too large\n");
    uint64_t leaked = atomic_load(&leaked_bytes);
    if (atomic_load(&live_bytes) != leaked + burst || (!noburst && atomic_load(&peak_bytes) != leaked + burst))
        die("truth_handoff: self-check failed: the peak is not leaked + burst\n");
    sleep_ms(50);
    for (size_t i = 0; i < nb; i++) {
        note_free(bsz[i]);
        f_free(blk[i]);
    }
    if (atomic_load(&live_bytes) != leaked) die("truth_handoff: self-check failed: live != leaked\n");

    put("allocs", atomic_load(&n_allocs));
    put("frees", atomic_load(&n_frees));
    put("leaked_objects", atomic_load(&n_leaked));
    put("leaked_bytes", leaked);
    put("peak_live_bytes", atomic_load(&peak_bytes));
    put("threads", (uint64_t)nth);
    put("streamed_bytes", stream_total);
    put("burst_bytes", burst);
    put("burst_allocs", nb);
    put("cross_thread_frees", atomic_load(&n_cross));
    return 0;
}
