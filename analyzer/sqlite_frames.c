/* sqlite_frames.c — the stacks and their symbolized frames, interned (see
 * sqlite_internal.h, SCHEMA.md).
 *
 * A trace with many distinct stacks repeats the same frames in most of
 * them: a PyTorch run's 602,866 stacks made 20.4 M frame rows, and with
 * the function, file and module written as text in every row the database
 * was 2.39 GB. Here each text is stored once (`names`), each distinct
 * displayed frame once (`frame_defs`: its pc, name ids, line, inlined,
 * python), and each site label once (`site_labels`).
 *
 * The stacks share their outer frames too (every one starts in main and
 * the interpreter's loop): a PyTorch dwarf trace's 1.40 M stacks had
 * 110.9 M displayed frames, one integer row each, 1.95 GB, but only 5.3 M
 * distinct paths from the outermost frame inward. So a stack is a path in
 * a prefix tree (`stack_nodes`: parent, frame, and the recorded frame it
 * belongs to counted from the outermost, the same in every stack that
 * shares the path) and its row names the innermost node; the
 * `stack_frames` and `frames` views walk the parents back.
 *
 * The interning is in memory: a hash of the text (or of the frame's, or
 * the node's, fields) to its id, the stored copy compared on a hit so that
 * two keys with one hash never share an id (the next key is probed). The
 * nodes are most of it: that trace's 5.3 M took about 215 MB of peak RSS
 * (the map's slots and the copies), schema 4's loader kept no such table.
 */
#include "sqlite_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"
#include "sites.h"
#include "strkeep.h"
#include "symbolize.h"

typedef struct fdef {
    uint64_t pc;
    uint32_t fn, file, mod;      /* names ids, 0 none */
    int32_t line;
    uint8_t inlined, python;
} fdef_t;

/* A prefix-tree node: the path from the outermost displayed frame down to
 * this one. outer: its recorded frame counted from the outermost (0), so
 * that a path means the same recorded frames in every stack that has it. */
typedef struct node {
    uint32_t parent;             /* 0: the outermost displayed frame */
    uint32_t fdef;
    uint32_t outer;
} node_t;

/* Texts stored once each in one table (names, site_labels). */
typedef struct texts {
    psc_strset_t set;            /* a text's id is its number in the set */
    sqlite3_stmt *ins;           /* INSERT INTO table VALUES(id, text) */
} texts_t;

typedef struct interner {
    texts_t names, sites;
    psc_map_t frame_ids;         /* hash of an fdef_t -> its id (uint32_t) */
    fdef_t *frames;              /* by id - 1 */
    size_t n_frames, cap_frames;
    sqlite3_stmt *ins_frame;
    psc_map_t node_ids;          /* hash of a node_t -> its id (uint32_t) */
    node_t *nodes;               /* by id - 1 */
    size_t n_nodes, cap_nodes;
    batch_t ins_node, ins_stack;
    int rc;
} interner_t;

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h ? h : 1;            /* the map keeps key 0 apart: never use it */
}

static int grow(void **a, size_t *cap, size_t n, size_t size)
{
    if (n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 1024;
    void *p = realloc(*a, c * size);
    if (!p) return -1;
    *a = p;
    *cap = c;
    return 0;
}

/* The id of text s in T (0 for NULL), its row written when new. */
static uint32_t text_id(interner_t *I, texts_t *T, const char *s)
{
    if (!s || I->rc) return 0;
    int is_new;
    uint32_t id = psc_strset_id(&T->set, s, &is_new);
    if (!id) { I->rc = SQLITE_NOMEM; return 0; }
    if (is_new) {
        sqlite3_bind_int64(T->ins, 1, id);
        sqlite3_bind_text(T->ins, 2, s, -1, SQLITE_STATIC);
        int rc = sqi_step_reset(T->ins);
        if (rc && !I->rc) I->rc = rc;
    }
    return id;
}

static void texts_free(texts_t *T)
{
    sqlite3_finalize(T->ins);
    psc_strset_free(&T->set);
}

static int fdef_eq(const fdef_t *a, const fdef_t *b)
{
    return a->pc == b->pc && a->fn == b->fn && a->file == b->file && a->mod == b->mod && a->line == b->line &&
           a->inlined == b->inlined && a->python == b->python;
}

/* The id of displayed frame f, its frame_defs row written when new. */
static uint32_t frame_id(interner_t *I, const az_frame_t *fi)
{
    fdef_t d = { .pc = fi->python ? 0 : fi->pc, .fn = text_id(I, &I->names, fi->function),
                 .file = text_id(I, &I->names, fi->file), .mod = text_id(I, &I->names, fi->module),
                 .line = fi->line, .inlined = (uint8_t)(fi->inlined != 0), .python = (uint8_t)(fi->python != 0) };
    if (I->rc) return 0;
    uint64_t h = mix(d.pc ^ mix((uint64_t)d.fn << 32 | d.file) ^
                     mix((uint64_t)d.mod << 32 | (uint32_t)d.line) ^ ((uint64_t)d.inlined << 1 | d.python));
    for (uint64_t key = h;; key = mix(key + 1)) {
        int is_new;
        uint32_t *v = psc_map_put_sz(&I->frame_ids, key, &is_new, sizeof(uint32_t));
        if (!v) { I->rc = SQLITE_NOMEM; return 0; }
        if (!is_new) {
            if (fdef_eq(&I->frames[*v - 1], &d)) return *v;
            continue;
        }
        if (grow((void **)&I->frames, &I->cap_frames, I->n_frames, sizeof *I->frames)) {
            psc_map_del(&I->frame_ids, key);
            I->rc = SQLITE_NOMEM;
            return 0;
        }
        I->frames[I->n_frames++] = d;
        *v = (uint32_t)I->n_frames;
        sqlite3_stmt *q = I->ins_frame;
        sqlite3_bind_int64(q, 1, *v);
        if (d.python) sqlite3_bind_null(q, 2); else sqi_bind_u64(q, 2, d.pc);
        if (d.fn) sqlite3_bind_int64(q, 3, d.fn); else sqlite3_bind_null(q, 3);
        if (d.file) sqlite3_bind_int64(q, 4, d.file); else sqlite3_bind_null(q, 4);
        if (d.line) sqlite3_bind_int(q, 5, d.line); else sqlite3_bind_null(q, 5);
        if (d.mod) sqlite3_bind_int64(q, 6, d.mod); else sqlite3_bind_null(q, 6);
        sqlite3_bind_int(q, 7, d.inlined);
        sqlite3_bind_int(q, 8, d.python);
        int rc = sqi_step_reset(q);
        if (rc && !I->rc) I->rc = rc;
        return *v;
    }
}

/* The id of the node (parent, fdef, outer), its stack_nodes row batched when new. */
static uint32_t node_id(interner_t *I, uint32_t parent, uint32_t fdef, uint32_t outer)
{
    if (I->rc) return 0;
    node_t d = { parent, fdef, outer };
    for (uint64_t key = mix(mix((uint64_t)parent << 32 | fdef) ^ outer);; key = mix(key + 1)) {
        int is_new;
        uint32_t *v = psc_map_put_sz(&I->node_ids, key, &is_new, sizeof(uint32_t));
        if (!v) { I->rc = SQLITE_NOMEM; return 0; }
        if (!is_new) {
            const node_t *n = &I->nodes[*v - 1];
            if (n->parent == parent && n->fdef == fdef && n->outer == outer) return *v;
            continue;
        }
        if (I->n_nodes >= UINT32_MAX - 1 ||
            grow((void **)&I->nodes, &I->cap_nodes, I->n_nodes, sizeof *I->nodes)) {
            psc_map_del(&I->node_ids, key);
            I->rc = SQLITE_NOMEM;
            return 0;
        }
        I->nodes[I->n_nodes++] = d;
        *v = (uint32_t)I->n_nodes;
        batch_t *b = &I->ins_node;
        int64_t *r = b->v[b->n];
        r[0] = *v; r[1] = parent; r[2] = fdef; r[3] = outer;
        b->null[b->n] = parent ? 0u : 1u << 1;
        if (++b->n == BATCH) {
            int rc = sqi_batch_flush(b);
            if (rc && !I->rc) I->rc = rc;
        }
        return *v;
    }
}

int sqi_stack_rows(loader_t *L, const az_scan_t *s, az_sql_stats_t *st)
{
    interner_t *I = calloc(1, sizeof *I);
    if (!I) return SQLITE_NOMEM;
    az_frame_t *dfr = malloc(4096 * sizeof *dfr);
    uint32_t *fid = malloc(4096 * sizeof *fid);
    az_sym_t *sym = az_sym_open(s->r);
    az_sv_t *sv = az_sv_create(s, sym, NULL);
    if (!dfr || !fid || psc_strset_init(&I->names.set) || psc_strset_init(&I->sites.set) ||
        psc_map_init(&I->frame_ids, sizeof(uint32_t), 1024, 0, NULL) ||
        psc_map_init(&I->node_ids, sizeof(uint32_t), 1024, 0, NULL)) {
        I->rc = SQLITE_NOMEM;
        goto out;
    }
    if (sqi_batch_prepare(L->db, &I->ins_stack, "stack_rows", 4) != SQLITE_OK ||
        sqi_batch_prepare(L->db, &I->ins_node, "stack_nodes", 4) != SQLITE_OK ||
        sqlite3_prepare_v2(L->db, "INSERT INTO names VALUES(?,?)", -1, &I->names.ins, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(L->db, "INSERT INTO site_labels VALUES(?,?)", -1, &I->sites.ins, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(L->db, "INSERT INTO frame_defs VALUES(?,?,?,?,?,?,?,?)", -1, &I->ins_frame, NULL) != SQLITE_OK) {
        I->rc = SQLITE_ERROR;
        goto out;
    }
    /* one row per stack (its depth, innermost node, site as report names
     * it); its displayed frames (inline chains expanded, innermost first)
     * are the path to that node, entered from the outermost */
    for (uint32_t id = 1; !I->rc; id++) {
        uint32_t depth = 0;
        const uint64_t *fr = pst_stack(s->r, id, &depth);
        if (!fr) break;
        char site[1400];
        const char *via = NULL, *lab = sv ? az_sv_label(sv, id, &via) : "(out of memory)";
        if (via) snprintf(site, sizeof site, "%s via %s", lab, via);
        else snprintf(site, sizeof site, "%s", lab);
        uint32_t lab_id = text_id(I, &I->sites, site);
        size_t n = sv ? az_sv_frames(sv, id, dfr, 4096) : 0;
        /* the frames numbered innermost first, as schema 4 numbered them */
        for (size_t k = 0; k < n; k++) fid[k] = frame_id(I, &dfr[k]);
        uint32_t node = 0;
        for (size_t k = n; k-- > 0 && !I->rc;) {
            /* a frame's level is below the recorded depth (az_sym_stack) */
            uint32_t outer = dfr[k].level < depth ? depth - 1 - dfr[k].level : 0;
            node = node_id(I, node, fid[k], outer);
        }
        if (I->rc) break;
        st->frames += n;
        batch_t *b = &I->ins_stack;
        int64_t *r = b->v[b->n];
        r[0] = id; r[1] = depth; r[2] = node; r[3] = lab_id;
        b->null[b->n] = node ? 0u : 1u << 2;
        if (++b->n == BATCH && (I->rc = sqi_batch_flush(b))) break;
        st->stacks++;
    }
    if (!I->rc) I->rc = sqi_batch_flush(&I->ins_node);
    if (!I->rc) I->rc = sqi_batch_flush(&I->ins_stack);
out:;
    int rc = I->rc;
    sqi_batch_finalize(&I->ins_stack);
    sqi_batch_finalize(&I->ins_node);
    sqlite3_finalize(I->ins_frame);
    texts_free(&I->names);
    texts_free(&I->sites);
    free(I->frames);
    free(I->nodes);
    psc_map_free(&I->frame_ids);
    psc_map_free(&I->node_ids);
    free(dfr);
    free(fid);
    az_sv_destroy(sv);
    az_sym_destroy(sym);
    free(I);
    return rc;
}
