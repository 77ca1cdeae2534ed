/* scope_main N M D K: N engine steps on the main thread, M on a second
 * thread (whose last blocks main frees; it starts its steps once main's
 * are done, so no other allocation falls inside its steps), then D calls of call_it from a
 * library loaded with dlopen (after a pause: the recorder hooks new
 * libraries within about 10 ms). Prints its own counts and results, which
 * must be the same traced or not. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct big { long a[9]; } big_t;
void *engine_step(int k, big_t b, double x, double *out, long r4, long r5, long r6, long r7, long r8, long r9);
long double ld_step(long double v);

static int K, M, go;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static void *kept[1024];
static double total[2];

static void *worker(void *arg)
{
    (void)arg;
    big_t b = { { 1, 2, 3, 4, 5, 6, 7, 8, 9 } };
    pthread_mutex_lock(&lock);
    while (!go) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < M && i < 1024; i++) {
        double o;
        kept[i] = engine_step(K, b, 0.25 * i, &o, 4, 5, 6, 7, 8, 9);
        total[1] += o;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 5) return 2;
    int n = atoi(argv[1]), d = atoi(argv[3]), errno_kept = 0;
    M = atoi(argv[2]);
    K = atoi(argv[4]);
    big_t b = { { 1, 2, 3, 4, 5, 6, 7, 8, 9 } };
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
    for (int i = 0; i < n; i++) {
        double o;
        errno = 0;
        free(engine_step(K, b, 1.5 * i, &o, 4, 5, 6, 7, 8, 9));
        errno_kept += errno == 42;
        total[0] += o;
    }
    pthread_mutex_lock(&lock);
    go = 1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
    pthread_join(t, NULL);
    for (int i = 0; i < M && i < 1024; i++) free(kept[i]);   /* allocated on the worker */
    void *h = dlopen(argc > 5 ? argv[5] : "libcaller.so", RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*call_it)(int) = (int (*)(int))dlsym(h, "call_it");
    struct timespec pause = { 0, 300 * 1000 * 1000 };
    nanosleep(&pause, NULL);
    long s = 0;
    for (int i = 0; i < d; i++) s += call_it(i);
    printf("steps=%d thread_steps=%d dl_calls=%d errno_kept=%d main=%.2f thread=%.2f dl=%ld ld=%.4Lf\n",
           n, M, d, errno_kept, total[0], total[1], s, ld_step(1.25L));
    return 0;
}
