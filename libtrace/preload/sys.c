/* sys.c — every raw system call of the interposer, the one OS boundary
 * (as mimalloc's prim layer). Raw, so no libc allocation and never one of
 * our own hooks: the tracer's own mappings (counted in tracer_bytes,
 * reported in SYNC), and the fallbacks the hooks take when the next
 * definition of a function is not resolved yet. dup2 is made of dup3
 * (and an fcntl check when both fds are one), as glibc does where the
 * kernel has no dup2 (aarch64). */
#include "preload.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Every mapping the tracer makes for itself goes through these two, so
 * tracer_bytes is what the tracer adds to the process (reported in SYNC). */
void *ps_sys_mmap(size_t len)
{
    void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    __atomic_add_fetch(&ps_g.tracer_bytes, len, __ATOMIC_RELAXED);
    return p;
}

void ps_sys_munmap(void *p, size_t len)
{
    if (!p) return;
    syscall(SYS_munmap, p, len);
    __atomic_sub_fetch(&ps_g.tracer_bytes, len, __ATOMIC_RELAXED);
}

int ps_real_close(int fd) { return (int)syscall(SYS_close, fd); }

pid_t ps_gettid(void) { return (pid_t)syscall(SYS_gettid); }

void *ps_map_shared(int fd, size_t len, uint64_t off)
{
    void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
    if (p == MAP_FAILED) return NULL;
    __atomic_add_fetch(&ps_g.tracer_bytes, len, __ATOMIC_RELAXED);
    return p;
}

/* ---- the hooks' fallbacks and the tracer's other raw calls ---- */

void *ps_sys_mmap_raw(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    return (void *)syscall(SYS_mmap, a, len, prot, flags, fd, off);
}

int ps_sys_munmap_raw(void *a, size_t len) { return (int)syscall(SYS_munmap, a, len); }

void *ps_sys_mremap(void *old, size_t old_len, size_t new_len, int flags, void *na)
{
    return (void *)syscall(SYS_mremap, old, old_len, new_len, flags, na);
}

int ps_sys_madvise(void *a, size_t len, int advice) { return (int)syscall(SYS_madvise, a, len, advice); }

int ps_sys_mprotect(void *a, size_t len, int prot) { return (int)syscall(SYS_mprotect, a, len, prot); }

long ps_sys_readlinkat(int dirfd, const char *path, char *buf, size_t cap)
{
    return syscall(SYS_readlinkat, dirfd, path, buf, cap);
}

long ps_sys_process_vm_readv(pid_t pid, const struct iovec *l, unsigned long nl,
                             const struct iovec *r, unsigned long nr, unsigned long flags)
{
    return syscall(SYS_process_vm_readv, pid, l, nl, r, nr, flags);
}

long ps_sys_membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

void ps_sys_exit_group(int status)
{
    for (;;) syscall(SYS_exit_group, status);
}

int ps_sys_close_range(unsigned lo, unsigned hi, int flags) { return (int)syscall(SYS_close_range, lo, hi, flags); }

int ps_sys_dup2(int old, int nfd)
{
    if (old == nfd) return syscall(SYS_fcntl, old, F_GETFD) < 0 ? -1 : nfd;
    return (int)syscall(SYS_dup3, old, nfd, 0);
}

int ps_sys_dup3(int old, int nfd, int flags) { return (int)syscall(SYS_dup3, old, nfd, flags); }

int ps_sys_tgkill(pid_t pid, pid_t tid, int sig) { return (int)syscall(SYS_tgkill, (long)pid, (long)tid, (long)sig); }
