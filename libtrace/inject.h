/* inject.h — calling functions inside another running process through
 * ptrace (prefix pi_): the half of `poolscope attach` that loads the tracer
 * (cli/cmd_attach.c). Internal to the tree; x86_64 Linux only (elsewhere
 * pi_open says PSC_EUNSUP).
 *
 *   char msg[PI_MSG_MAX];
 *   pi_proc_t *p;
 *   pi_open(pid, &p, msg, sizeof msg);                 // one thread stopped at a safe point
 *   uint64_t dlopen_fn = pi_libc_sym(p, "dlopen");
 *   uint64_t path = pi_put_str(p, "/x/libpoolscope-preload.so");
 *   uint64_t h;
 *   pi_call(p, dlopen_fn, (uint64_t[]){ path, RTLD_NOW }, 2, &h, msg, sizeof msg);
 *   pi_close(p);                                       // registers back, thread runs on
 *
 * Only the stopped thread is traced; the others run on all the while, as
 * they do when the program calls dlopen itself. Every function that can
 * fail returns 0 or a negative PSC_* code and writes one line into msg.
 */
#ifndef POOLSCOPE_INJECT_H
#define POOLSCOPE_INJECT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PI_MSG_MAX 512

typedef struct pi_proc pi_proc_t;

/* How the chosen thread was stopped (pi_how; for tests and messages). */
enum {
    PI_AT_SYSCALL = 1,   /* asleep in a system call that cannot hold the loader's or
                            malloc's lock; the call is restarted at pi_close */
    PI_AT_USER = 2,      /* running, outside libc, the loader, libgcc_s and the tracer
                            (stepped out of them first) */
};

/* Seize one thread of pid at a point where calling dlopen is safe, and save
 * all of its registers (general, and the whole XSAVE area: the program's
 * vector registers are live at an arbitrary instruction). Tries for up to
 * `budget_ms`. 0; PSC_EIO with msg (no permission, the process went away,
 * no thread reached a safe point in time: "no safe thread" in msg);
 * PSC_EUNSUP not x86_64. */
int pi_open(pid_t pid, int budget_ms, pi_proc_t **out, char *msg, size_t mcap);

/* The thread id chosen and how it was stopped (PI_AT_*). */
pid_t pi_tid(const pi_proc_t *p);
int pi_how(const pi_proc_t *p);

/* Address in the process of a function of its C library ("dlopen",
 * "dlsym", "dlerror"; glibc before 2.34 keeps them in libdl: looked up
 * there when libc lacks them). 0 when not found. */
uint64_t pi_libc_sym(pi_proc_t *p, const char *name);

/* Address of a global data symbol defined by the executable or a loaded
 * object other than libc, the loader and the tracer, from its symbol table
 * (.symtab, then .dynsym): what `ps__api` needs. 0 when not found. */
uint64_t pi_data_sym(pi_proc_t *p, const char *name);

/* Copy a NUL-terminated string into scratch room below the thread's stack
 * pointer (under the red zone), valid until pi_close; its address, 0 when
 * the room (4 KiB) is full or the write failed. */
uint64_t pi_put_str(pi_proc_t *p, const char *s);

/* Call fn(args[0..n-1]) (n <= 6, integer or pointer arguments) in the
 * stopped thread, on its own stack below the scratch room, and wait for it
 * to return (at most timeout_ms; 0 for ever). *ret is rax. The thread's
 * signals are blocked meanwhile but for faults and glibc's own; the rest
 * stay pending until pi_close. 0; PSC_EBUSY not returned yet (the call
 * runs on: pi_wait again, and pi_close waits for it, since a thread let go
 * in our call would crash the process when it returns); PSC_EIO the call
 * crashed, or the thread or the process ended. */
int pi_call(pi_proc_t *p, uint64_t fn, const uint64_t *args, int n, int timeout_ms, uint64_t *ret,
            char *msg, size_t mcap);
int pi_wait(pi_proc_t *p, int timeout_ms, uint64_t *ret, char *msg, size_t mcap);

/* Write n bytes at addr in the process (a pointer-sized aligned write is
 * one store). 0 or PSC_EIO. */
int pi_write(pi_proc_t *p, uint64_t addr, const void *buf, size_t n);

/* Read the NUL-terminated string at addr into buf (cut to cap - 1
 * bytes). 0 or PSC_EIO. */
int pi_read_str(pi_proc_t *p, uint64_t addr, char *buf, size_t cap);

/* Put every register back, let the thread go (a system call it slept in is
 * restarted), raise the signals held during calls, and free p. */
void pi_close(pi_proc_t *p);

#endif
