/* hooks_signal.c — the trace survives a death by signal.
 *
 * Without this, a program killed by SIGSEGV, abort() or SIGTERM loses
 * whatever its rings held since the last flush (up to 50 ms of events), and
 * one that dies in its first 50 ms leaves an empty trace.
 *
 * For every signal whose default action ends the process (the list below),
 * the kernel sees our handler whenever the program's own disposition is
 * SIG_DFL or a handler of its own; SIG_IGN goes to the kernel as it is.
 * sigaction() and signal() are hooked so the program sees and sets only
 * its own view (ps_g.sigs[]), exactly as it would without us:
 *   - the program's handler is set: ours is installed with the program's
 *     sa_mask and its SA_ONSTACK / SA_RESTART / SA_NODEFER bits, and calls
 *     it with the same arguments (SA_RESETHAND is applied to the view);
 *   - the program's view is SIG_DFL: the default action is about to end
 *     the process, so every ring is written out and END closes the trace,
 *     then the disposition is set to SIG_DFL for real and the death goes
 *     ahead unchanged: a fault (si_code > 0) returns and faults again; a
 *     sent signal (kill, raise, abort) is sent again and is delivered as
 *     soon as the handler returns. The exit status and the core dump are
 *     what they would have been.
 * The closing work never waits on a lock for long (the signal may have
 * interrupted the tracer itself in this thread): see ps_final_from_signal.
 *
 * Not covered: the toggle signal (POOLSCOPE_SIGNAL keeps its own handler),
 * sigset/sysv_signal/bsd_signal (they call glibc's internal sigaction), and
 * SIGKILL, which no process can catch: `poolscope record` counts what a
 * SIGKILL cost from the rings' shared counters instead.
 */
#include "preload.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static int is_fatal(int sig)
{
    switch (sig) {
    case SIGSEGV: case SIGBUS: case SIGFPE: case SIGILL: case SIGABRT: case SIGSYS:
    case SIGTERM: case SIGINT: case SIGHUP: case SIGQUIT: case SIGPIPE:
    case SIGXCPU: case SIGXFSZ: case SIGALRM: case SIGUSR1: case SIGUSR2:
        return sig != ps_g.sig;
    default:
        return 0;
    }
}

/* Signals the hardware raises: returning re-runs the faulting instruction. */
static int is_fault(int sig)
{
    return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL;
}

static int real_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!ps_g.proc.sigaction)
        ps_g.proc.sigaction = (__typeof__(ps_g.proc.sigaction))dlsym(RTLD_NEXT, "sigaction");
    return ps_g.proc.sigaction(sig, act, old);
}

static void on_fatal(int sig, siginfo_t *si, void *uc);

/* Puts our handler in the kernel for sig, with the program's mask and
 * behaviour bits taken from view. */
static int handler_is_function(const struct sigaction *v)
{
    if (v->sa_flags & SA_SIGINFO) return v->sa_sigaction != NULL;
    return v->sa_handler != SIG_DFL && v->sa_handler != SIG_IGN;
}

static int install_ours(int sig, const struct sigaction *view)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    sa.sa_mask = view->sa_mask;
    sa.sa_flags = SA_SIGINFO;
    if (handler_is_function(view)) sa.sa_flags |= view->sa_flags & (SA_RESTART | SA_NODEFER | SA_ONSTACK);
    else sa.sa_flags |= SA_ONSTACK;   /* closing the trace may run on an alternate stack if there is one */
    return real_sigaction(sig, &sa, NULL);
}

/* At start: our handler for every fatal signal the program leaves at its
 * default (an inherited SIG_IGN stays ignored). */
void ps_signals_init(void)
{
    for (int sig = 1; sig < PS_NSIG; sig++) {
        if (!is_fatal(sig)) continue;
        struct sigaction cur;
        if (real_sigaction(sig, NULL, &cur) != 0) continue;
        if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) {
            ps_g.sigs[sig].view = cur;
            if (install_ours(sig, &cur) == 0) ps_g.sigs[sig].ours = 1;
        }
    }
}

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
    int saved_errno = errno;
    ps_sig_t *s = &ps_g.sigs[sig];
    struct sigaction v = s->view;
    if (handler_is_function(&v)) {
        if (v.sa_flags & SA_RESETHAND) {
            memset(&s->view, 0, sizeof s->view);
            s->view.sa_handler = SIG_DFL;
        }
        errno = saved_errno;
        if (v.sa_flags & SA_SIGINFO) v.sa_sigaction(sig, si, uc);
        else v.sa_handler(sig);
        return;
    }
    /* SIG_DFL: the process ends now. */
    ps_final_from_signal();
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    real_sigaction(sig, &dfl, NULL);
    s->ours = 0;
    if (!is_fault(sig) || !si || si->si_code <= 0)
        ps_sys_tgkill(getpid(), ps_gettid(), sig);
    errno = saved_errno;
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (sig <= 0 || sig >= PS_NSIG || !is_fatal(sig) || !ps_g.active)
        return real_sigaction(sig, act, old);
    struct sigaction want;
    if (act) want = *act;   /* act and old may be the same object */
    ps_sig_t *s = &ps_g.sigs[sig];
    if (!s->ours && !act) return real_sigaction(sig, NULL, old);
    if (!s->ours) {
        /* ours is not in the kernel (inherited SIG_IGN, or default restored
         * on the way to death): what the kernel has is the program's view */
        if (real_sigaction(sig, NULL, &s->view) != 0) return -1;
    }
    if (old) *old = s->view;
    if (!act) return 0;
    if (!handler_is_function(&want) && want.sa_handler == SIG_IGN) {
        if (real_sigaction(sig, &want, NULL) != 0) return -1;
        s->ours = 0;
        s->view = want;
        return 0;
    }
    if (install_ours(sig, &want) != 0) return -1;
    s->view = want;
    s->ours = 1;
    return 0;
}

EXPORT sighandler_t signal(int sig, sighandler_t h)
{
    /* glibc's signal() has BSD semantics: SA_RESTART, the signal itself
     * blocked while its handler runs. */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, &old) != 0) return SIG_ERR;
    return (old.sa_flags & SA_SIGINFO) ? (sighandler_t)(void (*)(void))old.sa_sigaction : old.sa_handler;
}
