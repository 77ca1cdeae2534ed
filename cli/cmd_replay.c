/* cmd_replay.c — `poolscope replay`: parse arguments, call replay/, print.
 *
 * Exit codes: 0 done (at least one policy ran; skipped ones are in the
 * output), 2 bad usage or bad input (one line: "poolscope replay: FILE:
 * what is wrong"). The report's warnings are in its table or JSON and, so
 * that they are not missed, on stderr too ("poolscope replay: FILE:
 * warning: ...").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "escape.h"
#include "outfile.h"
#include "replay.h"
#include "units.h"

void cmd_replay_help(FILE *out)
{
    fputs("usage: poolscope replay FILE [--policy LIST] [--stream tensor|heap] [--json] [-o OUT]\n"
          "                        [--pool-cap BYTES] [--pool-min BYTES] [--pool-sites PATTERN]\n"
          "                        [--cache-cap BYTES] [--arena-reset MARKER] [--with-kv]\n"
          "                        [--block-size N] [--kv-context N] [--kv-step N]\n"
          "\n"
          "Re-simulate the allocations of a trace under other policies and compare them.\n"
          "The request stream is the trace's logical tensor events when it has any, else\n"
          "its heap events (malloc family; realloc = free + malloc).\n"
          "\n"
          "  --policy LIST        comma-separated (default: all):\n"
          "                         malloc  this process's allocator (glibc, or jemalloc /\n"
          "                                 mimalloc when preloaded), pages touched\n"
          "                         malloc-jemalloc, malloc-mimalloc (or allocators, all\n"
          "                                 three) the same with that library preloaded;\n"
          "                                 held = the allocator's own figure, and RSS\n"
          "                         arena   64-byte bumps in chunks doubling from 1 MiB,\n"
          "                                 reset at the end of each --arena-reset scope;\n"
          "                                 what is made outside every scope is long-lived,\n"
          "                                 in a region of its own\n"
          "                         pool    the real buffer pool over a simulated store; on\n"
          "                                 the heap stream only from --pool-min bytes or\n"
          "                                 --pool-sites, the rest as glibc chunks\n"
          "                         caching a caching tensor allocator after PyTorch's: 512 B\n"
          "                                 rounding, 2 MiB segments for <= 1 MiB, 20 MiB for\n"
          "                                 up to 10 MiB, best fit, split, coalesce; on the\n"
          "                                 heap stream it takes what the pool takes (the\n"
          "                                 same split), the rest as glibc chunks\n"
          "                         ideal   the peak-live lower bound\n"
          "                         kv-contiguous, kv-reserve, kv-step, kv-paged (or kv)\n"
          "                                 KV reservation, from request markers and KV\n"
          "                                 block events\n"
          "                         all     every policy that applies to the trace\n"
          "                       A policy from a set (all, kv, allocators, or no\n"
          "                       --policy) that the trace cannot drive is skipped with\n"
          "                       a line saying why\n"
          "                       (\"skipped kv-paged: the trace has no KV block events\");\n"
          "                       one given by its own name is an error instead. The KV\n"
          "                       policies need KV block events, kv-contiguous also a\n"
          "                       context (--kv-context or request markers), malloc\n"
          "                       its helper program, malloc-jemalloc / -mimalloc also\n"
          "                       their library (POOLSCOPE_JEMALLOC, POOLSCOPE_MIMALLOC).\n"
          "  --stream S           tensor, heap or auto (default auto)\n"
          "  --json               JSON on stdout: {\"trace\": ..., \"policies\": [...],\n"
          "                       \"skipped\": [{\"policy\": ..., \"reason\": ...}],\n"
          "                       \"warnings\": [...]} (warnings also on stderr)\n"
          "  -o OUT, --output OUT write the table or the JSON to OUT (default, and -:\n"
          "                       standard output); written whole or not at all, never\n"
          "                       over the trace (what `html --replay` reads)\n"
          "  --pool-cap BYTES     the pool's cap on cached bytes (default: the trace's\n"
          "                       POOL_CREATE, else 1 GiB); KiB/MiB/GiB accepted\n"
          "  --pool-min BYTES     heap stream: allocations of at least this go to the pool\n"
          "                       and to the caching allocator (default 128KiB, glibc's\n"
          "                       mmap threshold; 0 = all); both rows say what they took\n"
          "  --pool-sites PAT     heap stream: also allocations whose site or a wrapper it\n"
          "                       called through has PAT in its function name; in a Python\n"
          "                       stack, its innermost Python frame: \"Block.forward\",\n"
          "                       \"model.py:17\" (repeatable)\n"
          "  --cache-cap BYTES    caching: bytes of wholly free segments kept; beyond, they\n"
          "                       are released, largest first (default unlimited)\n"
          "  --arena-reset NAME   marker whose outermost scopes end an arena cycle\n"
          "                       (default forward; one that never opens a scope in the\n"
          "                       trace is an error, the default missing a warning)\n"
          "  --with-kv            KV blocks are arena objects too (they outlive scopes:\n"
          "                       lifetime violations)\n"
          "  --block-size N       kv-paged block size in tokens (default: the trace's)\n"
          "  --kv-context N       kv-contiguous reservation per request in tokens\n"
          "                       (default: the largest prompt + max tokens in the trace)\n"
          "  --kv-step N          kv-step growth in tokens (default 256)\n", out);
    fputs(cli_frames_help, out);
    fputs(cli_symbols_help, out);
    fputs("\n"
          "The table's i_frag is the one fragmentation figure, the same for every policy:\n"
          "internal fragmentation at the peak of live bytes, (bytes the policy gave the\n"
          "live objects - bytes they requested) / bytes it gave (report's internal_frag).\n"
          "What a policy holds beyond its blocks in use is peak_reserved against\n"
          "peak_outstanding (\"peak reserved\", \"peak allocated\" in the caching line).\n"
          "\n"
          "FILE may be - or another pipe: replay reads its input twice, so a trace that is\n"
          "not a regular file is read into memory first.\n"
          "A damaged trace (cut short or corrupt) is refused. Exit status 0 when at least\n"
          "one policy ran, or 2 for bad usage or input, a policy named that does not\n"
          "apply, or none applying.\n", out);
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

static int bad_value(const char *opt, const char *v, const char *want)
{
    cli_cmd_err("replay", "bad value for %s: '%s' (want %s)", opt, v, want);
    return CLI_USAGE;
}

typedef struct replay_args {
    rp_config_t cfg;
    const char *sites[RP_MAX_POOL_SITES];   /* --pool-sites, in cfg.pool_sites */
    cli_frames_t frames;                    /* --phase-frame, in cfg.phase_frames */
} replay_args_t;

static int take_bytes(const char *a, const char *v, uint64_t *out)
{
    double d;
    if (az_parse_bytes(v, &d) || d < 0 || d > (double)(1ull << 50) || d != (double)(uint64_t)d)
        return bad_value(a, v, "bytes, e.g. 64MiB");
    *out = (uint64_t)d;
    return 0;
}

/* Every option that takes a value; ctx is the replay_args_t. */
static int take(void *ctx, const char *a, const char *v)
{
    replay_args_t *ra = ctx;
    rp_config_t *cfg = &ra->cfg;
    char msg[256];
    uint64_t x;
    if (!strcmp(a, "--phase-frame")) return cli_frames_take(&ra->frames, "replay", v);
    if (!strcmp(a, "--policy")) {
        if (rp_policy_select(v, &cfg->policies, &cfg->optional, msg, sizeof msg)) {
            cli_cmd_err("replay", "%s", msg);
            return CLI_USAGE;
        }
    } else if (!strcmp(a, "--stream")) {
        if (!strcmp(v, "tensor")) cfg->stream = RP_STREAM_TENSOR;
        else if (!strcmp(v, "heap")) cfg->stream = RP_STREAM_HEAP;
        else if (!strcmp(v, "auto")) cfg->stream = RP_STREAM_AUTO;
        else { cli_cmd_err("replay", "--stream takes tensor, heap or auto, not '%s'", v); return CLI_USAGE; }
    } else if (!strcmp(a, "--pool-cap")) {
        if (take_bytes(a, v, &cfg->pool_cap)) return CLI_USAGE;
        cfg->pool_cap_set = 1;
    } else if (!strcmp(a, "--pool-min")) {
        if (take_bytes(a, v, &cfg->pool_min)) return CLI_USAGE;
        cfg->pool_min_set = 1;
    } else if (!strcmp(a, "--cache-cap")) {
        if (take_bytes(a, v, &cfg->cache_cap)) return CLI_USAGE;
        cfg->cache_cap_set = 1;
    } else if (!strcmp(a, "--pool-sites")) {
        if (!*v) { cli_cmd_err("replay", "--pool-sites needs a pattern"); return CLI_USAGE; }
        if (cfg->n_pool_sites == RP_MAX_POOL_SITES) {
            cli_cmd_err("replay", "at most %d --pool-sites patterns", RP_MAX_POOL_SITES);
            return CLI_USAGE;
        }
        ra->sites[cfg->n_pool_sites++] = v;
    } else if (!strcmp(a, "--arena-reset")) {
        if (!*v) { cli_cmd_err("replay", "--arena-reset needs a marker name"); return CLI_USAGE; }
        cfg->arena_reset = v;
    } else if (!strcmp(a, "--block-size")) {
        if (parse_u64(v, 1, 1u << 20, &x)) return bad_value(a, v, "1..1048576 tokens");
        cfg->block_size = (uint32_t)x;
    } else if (!strcmp(a, "--kv-context")) {
        if (parse_u64(v, 1, 1ull << 32, &x)) return bad_value(a, v, "tokens >= 1");
        cfg->kv_context = x;
    } else if (!strcmp(a, "--kv-step")) {
        if (parse_u64(v, 1, 1u << 20, &x)) return bad_value(a, v, "1..1048576 tokens");
        cfg->kv_step = (uint32_t)x;
    }
    return 0;
}

int cmd_replay(int argc, char **argv)
{
    replay_args_t ra;
    memset(&ra, 0, sizeof ra);
    ra.cfg = rp_config_default();
    ra.cfg.pool_sites = ra.sites;
    ra.cfg.phase_frames = ra.frames.specs;
    rp_config_t *const c = &ra.cfg;
    const char *file = NULL, *out_path = NULL;
    int json = 0;
    char msg[512];   /* "no selected policy applies" names each policy and why */
    const cli_opt_t opts[] = {
        { "--json", &json, NULL, NULL }, { "--with-kv", &c->with_kv, NULL, NULL }, { "-o --output", NULL, &out_path, NULL },
        { "--policy --stream --pool-cap --pool-min --pool-sites --cache-cap --arena-reset --block-size "
          "--kv-context --kv-step --phase-frame", NULL, NULL, take },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "replay", cmd_replay_help, opts, &ra, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (!file) { cli_cmd_err("replay", "no trace file (usage: poolscope replay FILE [options])"); return CLI_USAGE; }

    /* -o: opened before the work, so an output that is the trace is refused at once */
    psc_out_t *o = NULL;
    FILE *out = stdout;
    if (out_path && strcmp(out_path, "-")) {
        const char *inputs[1] = { file };
        if (psc_out_open(out_path, inputs, 1, PSC_OUT_SPECIAL, &o, msg, sizeof msg)) {
            cli_file_err("replay", file, msg);   /* as html and export: the trace, then what is wrong with -o */
            return CLI_USAGE;
        }
        if (!(out = psc_out_stream(o))) { psc_out_abort(o); return cli_file_err("replay", out_path, "cannot write it"); }
    }
    cli_progress_t pg;
    if (cli_progress_start(&pg, "replay", file)) {
        c->progress = cli_progress;
        c->progress_ctx = &pg;
    }
    rp_report_t *rep = NULL;
    c->n_phase_frames = ra.frames.n;
    rc = rp_run(file, c, &rep, msg, sizeof msg);
    cli_progress_done(&pg);
    /* the message and the warnings may quote the trace (its marker names): text (common/escape.h) */
    char em[sizeof msg * 4];
    if (rc) { psc_out_abort(o); return cli_file_err("replay", file, psc_esc_text(msg, em, sizeof em)); }
    for (size_t i = 0; i < rp_report_warning_count(rep); i++) {
        fprintf(stderr, "poolscope replay: %s: warning: ", file);
        psc_esc_text_put(stderr, rp_report_warning(rep, i));
        fputc('\n', stderr);
    }
    if (json) rp_report_json(rep, out);
    else rp_report_table(rep, out);
    rp_report_free(rep);
    if (o) return psc_out_commit(o, msg, sizeof msg) ? cli_file_err("replay", out_path, msg) : CLI_OK;
    if (fflush(stdout) != 0) return cli_file_err("replay", file, "cannot write the output");
    return CLI_OK;
}
