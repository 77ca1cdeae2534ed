/* sqlite_frames.c — the stacks and their symbolized frames, interned (see
 * sqlite_internal.h, SCHEMA.md).
 *
 * A trace with many distinct stacks repeats the same frames in most of
 * them: a PyTorch run's 602,866 stacks made 20.4 M frame rows, and with
 * the function, file and module written as text in every row the database
 * was 2.39 GB. Here each text is stored once (`names`), each distinct
 * displayed frame once (`frame_defs`: its pc, name ids, line, inlined,
 * python), and a stack's rows (`stack_frames`) hold only integers: the
 * frame's id and the recorded frame it belongs to. The documented
 * `frames` view joins them back into the columns it always had.
 *
 * The interning is in memory: a hash of the text (or of the frame's
 * fields) to its id, the stored copy compared on a hit so that two texts
 * with one hash never share an id (the next key is probed instead).
 */
#include "sqlite_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"
#include "sites.h"
#include "symbolize.h"

typedef struct fdef {
    uint64_t pc;
    uint32_t fn, file, mod;      /* names ids, 0 none */
    int32_t line;
    uint8_t inlined, python;
} fdef_t;

typedef struct interner {
    psc_map_t name_ids;          /* hash of a text (probed on a clash) -> its id (uint32_t) */
    char **names;                /* by id - 1 */
    size_t n_names, cap_names;
    psc_map_t frame_ids;         /* hash of an fdef_t -> its id (uint32_t) */
    fdef_t *frames;              /* by id - 1 */
    size_t n_frames, cap_frames;
    sqlite3_stmt *ins_name, *ins_frame;
    int rc;
} interner_t;

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h ? h : 1;            /* the map keeps key 0 apart: never use it */
}

static uint64_t text_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return mix(h);
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

/* The id of text s (0 for NULL), its names row written when new. */
static uint32_t name_id(interner_t *I, const char *s)
{
    if (!s || I->rc) return 0;
    for (uint64_t key = text_hash(s);; key = mix(key + 1)) {
        int is_new;
        uint32_t *v = psc_map_put_sz(&I->name_ids, key, &is_new, sizeof(uint32_t));
        if (!v) { I->rc = SQLITE_NOMEM; return 0; }
        if (!is_new) {
            if (strcmp(I->names[*v - 1], s) == 0) return *v;
            continue;            /* another text with this key: probe the next */
        }
        char *copy = strdup(s);
        if (!copy || grow((void **)&I->names, &I->cap_names, I->n_names, sizeof *I->names)) {
            free(copy);
            psc_map_del(&I->name_ids, key);
            I->rc = SQLITE_NOMEM;
            return 0;
        }
        I->names[I->n_names++] = copy;
        *v = (uint32_t)I->n_names;
        sqlite3_bind_int64(I->ins_name, 1, *v);
        sqlite3_bind_text(I->ins_name, 2, s, -1, SQLITE_STATIC);
        int rc = sqi_step_reset(I->ins_name);
        if (rc && !I->rc) I->rc = rc;
        return *v;
    }
}

static int fdef_eq(const fdef_t *a, const fdef_t *b)
{
    return a->pc == b->pc && a->fn == b->fn && a->file == b->file && a->mod == b->mod && a->line == b->line &&
           a->inlined == b->inlined && a->python == b->python;
}

/* The id of displayed frame f, its frame_defs row written when new. */
static uint32_t frame_id(interner_t *I, const az_frame_t *fi)
{
    fdef_t d = { .pc = fi->python ? 0 : fi->pc, .fn = name_id(I, fi->function), .file = name_id(I, fi->file),
                 .mod = name_id(I, fi->module), .line = fi->line, .inlined = (uint8_t)(fi->inlined != 0),
                 .python = (uint8_t)(fi->python != 0) };
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

int sqi_stack_rows(loader_t *L, const az_scan_t *s, az_sql_stats_t *st)
{
    interner_t I = { 0 };
    sqlite3_stmt *qs = NULL, *qf = NULL;
    az_frame_t *dfr = malloc(4096 * sizeof *dfr);
    az_sym_t *sym = az_sym_open(s->r);
    az_sv_t *sv = az_sv_create(s, sym, NULL);
    if (!dfr || psc_map_init(&I.name_ids, sizeof(uint32_t), 1024, 0, NULL) ||
        psc_map_init(&I.frame_ids, sizeof(uint32_t), 1024, 0, NULL)) {
        I.rc = SQLITE_NOMEM;
        goto out;
    }
    if (sqlite3_prepare_v2(L->db, "INSERT INTO stacks VALUES(?,?,?)", -1, &qs, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(L->db, "INSERT INTO stack_frames VALUES(?,?,?,?)", -1, &qf, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(L->db, "INSERT INTO names VALUES(?,?)", -1, &I.ins_name, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(L->db, "INSERT INTO frame_defs VALUES(?,?,?,?,?,?,?,?)", -1, &I.ins_frame, NULL) != SQLITE_OK) {
        I.rc = SQLITE_ERROR;
        goto out;
    }
    /* one row per stack (its site as report names it), one per displayed
     * frame of it (inline chains expanded, innermost first) naming its
     * frame_defs row and the recorded frame it belongs to */
    for (uint32_t id = 1; !I.rc; id++) {
        uint32_t depth = 0;
        const uint64_t *fr = pst_stack(s->r, id, &depth);
        if (!fr) break;
        char site[1400];
        const char *via = NULL, *lab = sv ? az_sv_label(sv, id, &via) : "(out of memory)";
        if (via) snprintf(site, sizeof site, "%s via %s", lab, via);
        else snprintf(site, sizeof site, "%s", lab);
        sqlite3_bind_int64(qs, 1, id);
        sqlite3_bind_int64(qs, 2, depth);
        sqlite3_bind_text(qs, 3, site, -1, SQLITE_STATIC);
        int rc = sqi_step_reset(qs);
        if (rc) { I.rc = rc; break; }
        st->stacks++;
        size_t n = sv ? az_sv_frames(sv, id, dfr, 4096) : 0;
        for (size_t k = 0; k < n && !I.rc; k++) {
            uint32_t f = frame_id(&I, &dfr[k]);
            if (I.rc) break;
            sqlite3_bind_int64(qf, 1, id);
            sqlite3_bind_int64(qf, 2, (sqlite3_int64)k);
            sqlite3_bind_int64(qf, 3, f);
            sqlite3_bind_int64(qf, 4, dfr[k].level);
            if ((rc = sqi_step_reset(qf))) I.rc = rc;
            st->frames++;
        }
    }
out:
    sqlite3_finalize(qs);
    sqlite3_finalize(qf);
    sqlite3_finalize(I.ins_name);
    sqlite3_finalize(I.ins_frame);
    for (size_t i = 0; i < I.n_names; i++) free(I.names[i]);
    free(I.names);
    free(I.frames);
    psc_map_free(&I.name_ids);
    psc_map_free(&I.frame_ids);
    free(dfr);
    az_sv_destroy(sv);
    az_sym_destroy(sym);
    return I.rc;
}
