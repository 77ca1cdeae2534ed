/* ctl.h — the interposer's shared counters file, and the recovery that
 * reads it after a SIGKILL (internal to libtrace: the interposer and
 * `poolscope record` include it; not installed).
 *
 * Why: a SIGKILL (or the OOM killer) ends a process without running any of
 * its code, so the events still in its rings are gone and the trace ends
 * without END. To say exactly how many were lost, each traced image keeps
 * its counters in a small file in shared memory (tmpfs), which outlives the
 * process: a header with the image's lost counters, then one slot per
 * thread whose first bytes are the thread's published-event count. The
 * thread's own record (preload.h, ps_thr_t) starts with its slot, so the
 * hot path's `nev++` is the only write and costs nothing extra.
 *
 * After the process died, pst_recover compares each stream's published
 * count with the events of that stream the trace file holds, cuts a partial
 * last chunk, writes an empty EVENTS chunk for each stream that never
 * reached the file, and appends END with the exact lost count and the
 * PST_END_KILLED flag. A clean END removes the file (the interposer does).
 *
 * Where: <dir>/<st_dev>.<st_ino>.ctl of the trace file, in a directory
 * `poolscope record` makes for the run with mkdtemp under /dev/shm (mode
 * 0700, a name no one can guess) and names in POOLSCOPE_CTL_DIR. Only the
 * recording user can put anything there: with a fixed name in /dev/shm
 * itself, another local user could plant a FIFO (recovery blocked for
 * ever) or a crafted file at the next trace's name (inode numbers are
 * reused at once). Both sides still open the file with O_NOFOLLOW and
 * O_NONBLOCK and check its type and owner. Without the variable (a bare
 * LD_PRELOAD, no tmpfs) there is no counters file: a SIGKILL leaves a
 * trace without END, read as truncated.
 */
#ifndef PS_CTL_H
#define PS_CTL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PST_CTL_MAGIC   "PSCTL\0\0\1"   /* 8 bytes */
#define PST_CTL_DIR_ENV "POOLSCOPE_CTL_DIR"
#define PST_CTL_DIR_TMPL "/dev/shm/poolscope.XXXXXX"   /* mkdtemp's template for record */
#define PST_CTL_HDR     4096u            /* the header page; slots follow */

typedef struct pst_ctl_hdr {
    char     magic[8];
    uint32_t slot_bytes;                 /* bytes of one slot (page multiple) */
    uint32_t n_slots;                    /* slots in the file */
    uint64_t pid;
    uint64_t lost_total;                 /* every event lost, for END */
    uint64_t lost_reported;              /* of those, reported by LOST records in streams */
    uint64_t closing_lost;               /* calls while an exec or the exit flush closed the file */
    uint64_t end_written;                /* 1: END is in the trace, nothing to recover */
    uint64_t stop_req;                   /* set by `record` (pst_ctl_stop): stop recording */
} pst_ctl_hdr_t;

typedef struct pst_ctl_slot {
    uint64_t nev;                        /* events the thread published (TS not counted) */
    uint32_t stream;                     /* 0: free slot */
    uint32_t pad_;
} pst_ctl_slot_t;

/* "<dir>/<dev>.<ino>.ctl" into out; 0, or -1 if it does not fit. Inline:
 * the interposer has no libtrace objects but format.c. */
static inline int pst_ctl_path(char *out, size_t cap, const char *dir, uint64_t dev, uint64_t ino)
{
    int n = snprintf(out, cap, "%s/%llu.%llu.ctl", dir, (unsigned long long)dev, (unsigned long long)ino);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

typedef struct pst_recover_info {
    int      recovered;                  /* 1: END was appended */
    uint64_t events;                     /* events in the trace */
    uint64_t lost;                       /* END's lost count: in the rings when killed, or never written */
    uint64_t cut_bytes;                  /* bytes of a partial last chunk that were cut */
} pst_recover_info_t;

/* For a trace without END whose process has died: if its counters file
 * exists in ctl_dir (NULL: none), finish the trace as described above and
 * remove the file. A counters file that is not a regular file of ours is
 * left alone and not read. Returns 1 recovered, 0 nothing to do (no
 * counters file, or END present: the file is removed then), negative PSC_E*
 * on error (the trace is left as it was). */
int pst_recover(const char *trace_path, const char *ctl_dir, pst_recover_info_t *out);

/* ---- stopping a run's recording (record --duration, --until-signal) ----
 *
 * Why through these files rather than a signal: the program may use any
 * signal itself, and a run has several images (fork children, exec'd
 * programs) that `record` knows only by their counters files. So `record`
 * creates PST_CTL_STOP in the run's directory, then sets stop_req in the
 * header of every counters file there; the interposer's tracer thread
 * reads stop_req at each tick and stops: recording paused for good, every
 * ring written, END with PST_END_STOPPED, the counters file removed; the
 * program runs on with every hook passing its call through. An image that
 * starts later (a fork, an exec) finds PST_CTL_STOP and records nothing;
 * one that made its counters file after the scan finds PST_CTL_STOP after
 * making it and stops itself. Returns the number of images asked to stop,
 * or -1 when the directory cannot take the stop file. */
#define PST_CTL_STOP "stop"
int pst_ctl_stop(const char *ctl_dir);

#endif
