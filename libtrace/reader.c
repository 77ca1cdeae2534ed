/* reader.c — the reader's lifecycle: pst_open / pst_open_mem, pst_close,
 * and the status and window accessors.
 *
 * The reader is split by concern (rd_internal.h has the map): rd_chunk.c
 * reads the input and its chunks, rd_decode.c validates and queues events,
 * rd_merge.c orders them and implements pst_next. This file only creates a
 * reader, lets rd_parse_header check the file header, and frees everything
 * the parts built (their tables are plain structs, so one teardown here
 * keeps the failure paths of pst_open simple).
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "invariant.h"
#include "rd_internal.h"

#define RD_READ_BLOCK (1u << 20)   /* read() size; the buffer grows to a whole chunk when one needs it */

const pst_status_t *pst_status(const pst_reader_t *r) { return &r->st; }
void pst_reader_set_window(pst_reader_t *r, uint64_t ns) { r->window = ns; }

static pst_reader_t *rd_reader_new(void)
{
    pst_reader_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->fd = -1;
    r->window = PST_DEFAULT_WINDOW_NS;
    r->scan_base = RD_SCAN_BASE;
    r->scan_per_event = RD_SCAN_PER_EVENT;
    r->sync_guard = RD_SYNC_GUARD;
    r->idbuf = malloc(PST_MAX_IDS * sizeof *r->idbuf);
    r->out_ids = malloc(PST_MAX_IDS * sizeof *r->out_ids);
    r->stk_out = calloc(1, sizeof *r->stk_out);
    r->parse_f = malloc(RD_MAX_STACK_DEPTH * sizeof *r->parse_f);
    r->path = malloc(RD_MAX_STACK_DEPTH * sizeof *r->path);
    if (!r->idbuf || !r->out_ids || !r->stk_out || !r->parse_f || !r->path || rd_map_init(&r->string_ids) || rd_map_init(&r->stack_ids) ||
        rd_map_init(&r->stream_ids) || rd_map_init(&r->pool_ids) ||
        rd_amap_init(&r->pend[0].head) || rd_amap_init(&r->pend[1].head) || rd_amap_init(&r->ahead)) {
        psc_map_free(&r->pend[0].head); psc_map_free(&r->pend[1].head); psc_map_free(&r->ahead);
        psc_map_free(&r->string_ids); psc_map_free(&r->stack_ids);
        psc_map_free(&r->stream_ids); psc_map_free(&r->pool_ids);
        free(r->idbuf); free(r->out_ids); free(r->stk_out); free(r->parse_f); free(r->path); free(r);
        return NULL;
    }
    rd_decode_init(r);
    return r;
}

static pst_reader_t *rd_finish_open(pst_reader_t *r, int *err)
{
    int rc = rd_parse_header(r);
    if (rc) {
        pst_close(r);
        if (err) *err = rc;
        return NULL;
    }
    return r;
}

pst_reader_t *pst_open(const char *path, int *err)
{
    pst_reader_t *r = rd_reader_new();
    if (!r) { if (err) *err = PSC_ENOMEM; return NULL; }
    if (!(r->buf = malloc(RD_READ_BLOCK))) { pst_close(r); if (err) *err = PSC_ENOMEM; return NULL; }
    r->bcap = RD_READ_BLOCK;
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        int e = errno;
        pst_close(r);
        errno = e;
        if (err) *err = PSC_EIO;
        return NULL;
    }
    return rd_finish_open(r, err);
}

pst_reader_t *pst_open_mem(const void *buf, size_t len, int *err)
{
    pst_reader_t *r = rd_reader_new();
    if (!r) { if (err) *err = PSC_ENOMEM; return NULL; }
    r->mem = buf;
    r->mem_len = len;
    return rd_finish_open(r, err);
}

#if PS_DEBUG
static void rd_dbg_forget(const pst_reader_t *r);
#endif

void pst_close(pst_reader_t *r)
{
    if (!r) return;
#if PS_DEBUG
    rd_dbg_forget(r);
#endif
    if (r->fd >= 0) close(r->fd);
    free(r->buf);
    pst_inflate_done(&r->z);
    free(r->exe); free(r->tool); free(r->host); free(r->scope_funcs); free(r->argv_raw); free(r->argv);
    for (uint32_t i = 0; i < r->n_strings; i++) free(r->strings[i].s);
    free(r->strings);
    free(r->stacks);
    free(r->nodes);
    free(r->node_tab);
    free(r->path);
    free(r->parse_f);
    free(r->stk_out);
    for (size_t i = 0; i < r->n_mods; i++) { free((void *)r->mods[i].path); free((void *)r->mods[i].build_id); }
    free(r->mods);
    psc_map_free(&r->string_ids);
    psc_map_free(&r->stack_ids);
    psc_map_free(&r->stream_ids);
    for (uint32_t i = 0; i < r->n_sv; i++) {
        rd_stream_t *s = r->sv[i];
        free(s->b);
        free(s->ids);
        free(s->blk);
        free(s->pq[0].a);
        free(s->pq[1].a);
        free(s);
    }
    free(r->sv);
    free(r->hq.a);
    for (int i = 0; i < 2; i++) {
        free(r->live[i].k);
        free(r->live[i].live);
        free(r->live[i].own);
    }
    for (int i = 0; i < 2; i++) {
        psc_map_free(&r->pend[i].head);
        free(r->pend[i].nodes);
        free(r->pend[i].runs);
    }
    psc_map_free(&r->pool_ids);
    psc_map_free(&r->ahead);
    for (uint32_t i = 0; i < r->n_pools; i++) free(r->pools[i].h);
    free(r->pools);
    free(r->force);
    free(r->pops);
    free(r->fops);
    free(r->bclose);
    free(r->vexp);
    free(r->vlast);
    free(r->out_ids);
    free(r->idbuf);
    free(r);
}

/* ---- the debug build's check of what pst_next hands out ------------------------
 *
 * The debug build links every program with -Wl,--wrap=pst_next, so each call
 * of pst_next outside rd_merge.c comes here first, and this checks the
 * event against what the reader promises (reader.h, FORMAT.md "Reading"):
 * a stream's events come out in its own order (seq one more than the
 * stream's last event) and never earlier in time than its last one (unless
 * a stream's time wrapped, which the reader reads as damage); lists and
 * payloads fit their bounds; a stack id names a defined stack; the status
 * counts the event. Checks that need the merge's own tables wait for the
 * reader's split into stages (issue 29, item 3).
 *
 * The last (seq, ts) of each stream lives in a table per open reader, kept
 * here rather than in the reader so that the reader's structures are the
 * same in every build; one lock guards the list of tables (the debug build
 * only: readers in several threads are allowed).
 */
#if PS_DEBUG
#include <pthread.h>

typedef struct rd_dbg {
    const pst_reader_t *r;
    psc_map_t last;                /* stream id -> rd_dbg_last_t */
    struct rd_dbg *next;
} rd_dbg_t;
typedef struct rd_dbg_last { uint64_t seq, ts; } rd_dbg_last_t;

static pthread_mutex_t rd_dbg_mu = PTHREAD_MUTEX_INITIALIZER;
static rd_dbg_t *rd_dbg_list;

static void rd_dbg_forget(const pst_reader_t *r)
{
    pthread_mutex_lock(&rd_dbg_mu);
    for (rd_dbg_t **pp = &rd_dbg_list; *pp; pp = &(*pp)->next) {
        if ((*pp)->r != r) continue;
        rd_dbg_t *d = *pp;
        *pp = d->next;
        psc_map_free(&d->last);
        free(d);
        break;
    }
    pthread_mutex_unlock(&rd_dbg_mu);
}

/* The stream's order and time against its previous event (lock held).
 * Without memory for the table there is no verdict. */
static const char *rd_dbg_stream(const pst_reader_t *r, const pst_event_t *ev)
{
    rd_dbg_t *d = rd_dbg_list;
    while (d && d->r != r) d = d->next;
    if (!d) {
        if (!(d = calloc(1, sizeof *d))) return NULL;
        if (psc_map_init(&d->last, sizeof(rd_dbg_last_t), 16, 0, NULL)) { free(d); return NULL; }
        d->r = r;
        d->next = rd_dbg_list;
        rd_dbg_list = d;
    }
    int is_new;
    rd_dbg_last_t *l = psc_map_put_sz(&d->last, ev->stream, &is_new, sizeof(rd_dbg_last_t));
    if (!l) return NULL;
    const char *why = NULL;
    if (!is_new && ev->seq != l->seq + 1)
        why = "an event of a stream came out of its stream's order (seq)";
    else if (!is_new && ev->ts < l->ts && !r->ts_wrapped)
        why = "an event came out earlier in time than the last one of its stream";
    l->seq = ev->seq;
    l->ts = ev->ts;
    return why;
}

static const char *rd_dbg_event(const pst_reader_t *r, const pst_event_t *ev, uint64_t events_before)
{
    uint32_t depth;
    if (pst_status(r)->events != events_before + 1) return "the status did not count the event handed out";
    if (ev->n_ids > PST_MAX_IDS || (ev->n_ids != 0) != (ev->ids != NULL))
        return "an event's block-id list is out of its bounds";
    if (ev->n_payload > PST_MAX_PAYLOAD) return "an event's payload is out of its bounds";
    if (ev->n_ver > 2) return "an event carries more than two versions";
    if (ev->stack && !pst_stack(r, ev->stack, &depth)) return "an event names a stack that is not defined";
    pthread_mutex_lock(&rd_dbg_mu);
    const char *why = rd_dbg_stream(r, ev);
    pthread_mutex_unlock(&rd_dbg_mu);
    return why;
}

/* Declared here: they exist only in the debug build, for the linker, so a
 * PS_DEBUG build must link with -Wl,--wrap=pst_next (the Makefile's debug
 * target does). The reference to the real one is strong: it is what pulls
 * rd_merge.o out of the archive, nothing else calls into it. */
int __real_pst_next(pst_reader_t *r, pst_event_t *ev);
int __wrap_pst_next(pst_reader_t *r, pst_event_t *ev);

int __wrap_pst_next(pst_reader_t *r, pst_event_t *ev)
{
    uint64_t before = pst_status(r)->events;
    int rc = __real_pst_next(r, ev);
    if (rc > 0) PSC_VERIFY("reader", NULL, rd_dbg_event(r, ev, before));
    return rc;
}
#endif
