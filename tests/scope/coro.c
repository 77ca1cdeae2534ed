/* coro: a hooked call (getpid) made first thing on a makecontext stack
 * whose top lies under a PROT_NONE guard, as coroutine pools lay out their
 * stacks: the stub must not copy "stack arguments" from the guard. */
#include <stdio.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

static ucontext_t main_ctx, co_ctx;

static void co(void)
{
    volatile int pid = getpid();
    (void)pid;
    swapcontext(&co_ctx, &main_ctx);
}

int main(void)
{
    char *m = mmap(NULL, 3 * 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + 2 * 65536, 65536, PROT_NONE) != 0) return 1;
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = m + 65536;
    co_ctx.uc_stack.ss_size = 65536;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, co, 0);
    swapcontext(&main_ctx, &co_ctx);
    puts("coroutine returned");
    return 0;
}
