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
    if (!r->idbuf || !r->out_ids || rd_map_init(&r->string_ids) || rd_map_init(&r->stack_ids) ||
        rd_map_init(&r->stream_ids) || rd_map_init(&r->pool_ids) ||
        rd_amap_init(&r->pend[0].head) || rd_amap_init(&r->pend[1].head) || rd_amap_init(&r->ahead)) {
        psc_map_free(&r->pend[0].head); psc_map_free(&r->pend[1].head); psc_map_free(&r->ahead);
        psc_map_free(&r->string_ids); psc_map_free(&r->stack_ids);
        psc_map_free(&r->stream_ids); psc_map_free(&r->pool_ids);
        free(r->idbuf); free(r->out_ids); free(r);
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

void pst_close(pst_reader_t *r)
{
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    free(r->buf);
    pst_inflate_done(&r->z);
    free(r->exe); free(r->tool); free(r->host); free(r->scope_funcs); free(r->argv_raw); free(r->argv);
    for (uint32_t i = 0; i < r->n_strings; i++) free(r->strings[i].s);
    free(r->strings);
    for (uint32_t i = 0; i < r->n_stacks; i++) free(r->stacks[i].f);
    free(r->stacks);
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
