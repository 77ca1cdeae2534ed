/* cmd_replay.c — `poolscope replay`: parse arguments, call replay/, print.
 *
 * Exit codes: 0 done, 2 bad usage or bad input (one line:
 * "poolscope replay: FILE: what is wrong").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "replay.h"
#include "units.h"

void cmd_replay_help(FILE *out)
{
    fputs("usage: poolscope replay FILE [--policy LIST] [--stream tensor|heap] [--json]\n"
          "                        [--pool-cap BYTES] [--arena-reset MARKER] [--with-kv]\n"
          "                        [--block-size N] [--kv-context N] [--kv-step N]\n"
          "\n"
          "Re-simulate the allocations of a trace under other policies and compare them.\n"
          "The request stream is the trace's logical tensor events when it has any, else\n"
          "its heap events (malloc family; realloc = free + malloc).\n"
          "\n"
          "  --policy LIST        comma-separated (default: all that apply):\n"
          "                         malloc  this process's allocator (glibc, or jemalloc /\n"
          "                                 mimalloc when preloaded), pages touched\n"
          "                         arena   64-byte bumps in chunks doubling from 1 MiB,\n"
          "                                 reset at the end of each --arena-reset scope\n"
          "                         pool    the real buffer pool over a simulated store\n"
          "                         ideal   the peak-live lower bound\n"
          "                         kv-contiguous, kv-reserve, kv-step, kv-paged (or kv)\n"
          "                                 KV reservation, from request markers and KV\n"
          "                                 block events\n"
          "                         all\n"
          "  --stream S           tensor, heap or auto (default auto)\n"
          "  --json               JSON on stdout: {\"trace\": ..., \"policies\": [...]}\n"
          "  --pool-cap BYTES     the pool's cap on cached bytes (default: the trace's\n"
          "                       POOL_CREATE, else 1 GiB); KiB/MiB/GiB accepted\n"
          "  --arena-reset NAME   marker whose outermost scopes end an arena cycle\n"
          "                       (default forward)\n"
          "  --with-kv            KV blocks are arena objects too (they outlive scopes:\n"
          "                       lifetime violations)\n"
          "  --block-size N       kv-paged block size in tokens (default: the trace's)\n"
          "  --kv-context N       kv-contiguous reservation per request in tokens\n"
          "                       (default: the largest prompt + max tokens in the trace)\n"
          "  --kv-step N          kv-step growth in tokens (default 256)\n"
          "\n"
          "A damaged trace (cut short or corrupt) is refused. Exit status 0, or 2 for bad\n"
          "usage or input.\n", out);
}

__attribute__((format(printf, 2, 3))) static int bad(const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "poolscope replay: ");
    if (what) fprintf(stderr, "%s: ", what);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_USAGE;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *e;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno || *e || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cmd_replay(int argc, char **argv)
{
    rp_config_t cfg = rp_config_default();
    const char *file = NULL;
    int json = 0;
    char msg[256];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cmd_replay_help(stdout);
            return CLI_OK;
        }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--with-kv")) { cfg.with_kv = 1; continue; }
        if (a[0] != '-' || !strcmp(a, "-")) {
            if (file) return bad(NULL, "one trace file only (got '%s' too)", a);
            file = a;
            continue;
        }
        static const char *const takes[] = { "--policy", "--stream", "--pool-cap", "--arena-reset",
                                             "--block-size", "--kv-context", "--kv-step", NULL };
        int known = 0;
        for (int k = 0; takes[k]; k++) known |= !strcmp(a, takes[k]);
        if (!known) return bad(NULL, "unknown option '%s' (see poolscope help replay)", a);
        if (i + 1 >= argc) return bad(NULL, "%s needs a value", a);
        const char *v = argv[++i];
        uint64_t x;
        if (!strcmp(a, "--policy")) {
            if (rp_policy_parse(v, &cfg.policies, msg, sizeof msg)) return bad(NULL, "%s", msg);
        } else if (!strcmp(a, "--stream")) {
            if (!strcmp(v, "tensor")) cfg.stream = RP_STREAM_TENSOR;
            else if (!strcmp(v, "heap")) cfg.stream = RP_STREAM_HEAP;
            else if (!strcmp(v, "auto")) cfg.stream = RP_STREAM_AUTO;
            else return bad(NULL, "--stream takes tensor, heap or auto, not '%s'", v);
        } else if (!strcmp(a, "--pool-cap")) {
            double d;
            if (az_parse_bytes(v, &d) || d < 0 || d > (double)(1ull << 50) || d != (double)(uint64_t)d)
                return bad(NULL, "bad value for --pool-cap: '%s' (want bytes, e.g. 64MiB)", v);
            cfg.pool_cap = (uint64_t)d;
            cfg.pool_cap_set = 1;
        } else if (!strcmp(a, "--arena-reset")) {
            if (!*v) return bad(NULL, "%s", "--arena-reset needs a marker name");
            cfg.arena_reset = v;
        } else if (!strcmp(a, "--block-size")) {
            if (parse_u64(v, 1, 1u << 20, &x))
                return bad(NULL, "bad value for --block-size: '%s' (want 1..1048576 tokens)", v);
            cfg.block_size = (uint32_t)x;
        } else if (!strcmp(a, "--kv-context")) {
            if (parse_u64(v, 1, 1ull << 32, &x))
                return bad(NULL, "bad value for --kv-context: '%s' (want tokens >= 1)", v);
            cfg.kv_context = x;
        } else if (!strcmp(a, "--kv-step")) {
            if (parse_u64(v, 1, 1u << 20, &x))
                return bad(NULL, "bad value for --kv-step: '%s' (want 1..1048576 tokens)", v);
            cfg.kv_step = (uint32_t)x;
        }
    }
    if (!file) return bad(NULL, "%s", "no trace file (usage: poolscope replay FILE [options])");

    cli_progress_t pg = { "replay", file, 0 };
    if (cli_progress_wanted()) {
        cfg.progress = cli_progress;
        cfg.progress_ctx = &pg;
    }
    rp_report_t *rep = NULL;
    int rc = rp_run(file, &cfg, &rep, msg, sizeof msg);
    cli_progress_done(&pg);
    if (rc) return bad(file, "%s", msg);
    if (json) rp_report_json(rep, stdout);
    else rp_report_table(rep, stdout);
    rp_report_free(rep);
    if (fflush(stdout) != 0) return bad(file, "%s", "cannot write the output");
    return CLI_OK;
}
