/* fuzz_plot.c — libFuzzer harness for `poolscope plot`: any bytes (as a
 * memfd path) go through az_plot — the scan, then every figure's data file
 * and gnuplot script, written into a directory in /dev/shm (the temporary
 * directory and its commit, common/outfile.c) which is emptied afterwards.
 * An input that starts with '{' is given as --replay JSON (the policies
 * figure) instead of a trace. The last byte picks a --phase and a
 * --from/--to window.
 *
 * gnuplot is never run: this file defines fork() (the executable's symbol
 * comes before libc's for plot.c's call), returning the pid of no child,
 * so run_gnuplot's waitpid finds nothing to wait for and reads a status of
 * 0 — a drawn figure. What is fuzzed is what poolscope writes; a fork and
 * two gnuplot runs per figure would cut the rate a hundredfold and test
 * gnuplot instead.
 */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "plot.h"

pid_t fork(void);
pid_t fork(void) { return 0x3fffffff; }   /* above any pid_max: never a child of ours */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) { empty_dir(p); rmdir(p); }
    }
    closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[64], dir[64], msg[512];
    uint8_t k = size ? data[size - 1] : 0;
    if (fuzz_input_path(data, size, in, sizeof in)) return 0;
    snprintf(dir, sizeof dir, "/dev/shm/poolscope-fuzz-plot.%d", (int)getpid());
    az_plot_opts_t o = { .dir = dir };
    if (size && data[0] == '{') o.replay_json = in;
    else {
        o.trace = in;
        if (k & 1) o.phase = k & 2 ? "forward" : "decode";
        if (k & 4) { o.window = 1; o.from = (uint64_t)(k >> 3) * 1000; o.to = o.from + 100000; }
    }
    az_plot_out_t *out = malloc(sizeof *out);   /* 10 KiB: not on libFuzzer's stack */
    if (!out) return 0;
    (void)az_plot(&o, out, msg, sizeof msg);
    free(out);
    empty_dir(dir);
    rmdir(dir);   /* the next input makes it anew (a new directory is committed by rename) */
    return 0;
}
