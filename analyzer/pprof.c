/* pprof.c — the heap's allocation sites as a pprof profile (see export.h):
 * the gzipped protobuf of github.com/google/pprof's profile.proto, which
 * `go tool pprof`, Pyroscope, Parca and Grafana read.
 *
 * One sample per allocation site (stack id), with four values in the
 * order of sample_type: alloc_objects (count), alloc_space (bytes),
 * inuse_objects and inuse_space (what is live at the end of the trace:
 * the leaks). alloc_space is the default. A sample's locations are its
 * displayed stack as `report` shows it: each recorded frame one location
 * at its address, its inline chain as the location's lines (innermost
 * first, the physical function last, as profile.proto orders them), the
 * allocation wrappers at the inner end dropped (the README's "Sites").
 *
 * A Python frame (format.h, PST_PYFRAME) is a location of its own without
 * an address (0: its recorded value is no address, and pprof would show it
 * as one), one line: its function (the qualified name, filename the .py
 * file) at the line it ran. Its system_name is "file:qualname", not the
 * name: pprof "demangles" a function whose two names are equal, and takes
 * a name with angle brackets for a C++ one whose template arguments it
 * drops ("<module>" would read as "", "<unknown>").
 *
 * Mappings: one per module the trace recorded (its path, build-id as hex,
 * and the address range it was loaded at, file offset 0: the module's base
 * is where its file's offset 0 lies), the traced program's own first,
 * since pprof takes the first mapping for the main binary and names the
 * profile after it ("Main binary filename not available" without one).
 * Each native location points at the mapping holding its address, so a
 * consumer that symbolizes for itself (Pyroscope, pprof -symbolize) knows
 * which file and build to read; a Python frame has none.
 *
 * The message is encoded by hand (five message types, varints and
 * length-delimited fields) into memory, then compressed with zlib's gzip
 * stream: a protobuf library would be a larger dependency than the 150
 * lines it saves.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "escape.h"
#include "export.h"
#include "hashmap.h"
#include "poolscope/error.h"
#include "scan.h"
#include "sites.h"
#include "symbolize.h"

typedef struct pbuf { unsigned char *p; size_t n, cap; int oom; } pbuf_t;

static void put(pbuf_t *b, const void *d, size_t n)
{
    if (b->oom || n == 0) return;    /* an empty piece may have no buffer (memcpy from NULL: UB) */
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n) c *= 2;
        unsigned char *q = realloc(b->p, c);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void varint(pbuf_t *b, uint64_t v)
{
    unsigned char t[10];
    size_t n = 0;
    do { t[n] = (unsigned char)(v & 0x7f); v >>= 7; if (v) t[n] |= 0x80; n++; } while (v);
    put(b, t, n);
}

static void field_u(pbuf_t *b, unsigned f, uint64_t v) { varint(b, (uint64_t)f << 3); varint(b, v); }
static void field_bytes(pbuf_t *b, unsigned f, const void *d, size_t n)
{
    varint(b, (uint64_t)f << 3 | 2);
    varint(b, n);
    put(b, d, n);
}
static void field_msg(pbuf_t *b, unsigned f, pbuf_t *m)
{
    field_bytes(b, f, m->p, m->n);
    if (m->oom) b->oom = 1;
    m->n = 0;
}

/* The string table: hash of a text -> its index (and the text, to tell
 * two texts of one hash apart), the texts written in order. */
typedef struct strent { uint64_t id; char *text; } strent_t;
typedef struct strtab { psc_map_t ids; pbuf_t out; uint64_t n; } strtab_t;

static uint64_t str_id(strtab_t *t, const char *s)
{
    if (!s || !*s) return 0;                       /* index 0 is "" */
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = s; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    /* a hash collision between two texts would merge them: keyed by hash
     * and checked against the text kept beside it */
    for (;; h++) {
        int is_new;
        strent_t *e = psc_map_put(&t->ids, h, &is_new);
        if (!e) { t->out.oom = 1; return 0; }
        if (is_new) {
            e->text = strdup(s);
            if (!e->text) { t->out.oom = 1; psc_map_del(&t->ids, h); return 0; }
            e->id = ++t->n;
            /* profile.proto strings are UTF-8 and pprof prints them on a
             * terminal: a name from the trace goes in as text
             * (common/escape.h), control bytes and non-UTF-8 as \xNN */
            if (psc_esc_text_needed(s)) {
                char *x = psc_esc_text_dup(s);
                if (!x) { t->out.oom = 1; return 0; }
                field_bytes(&t->out, 6, x, strlen(x));
                free(x);
            } else {
                field_bytes(&t->out, 6, s, strlen(s));
            }
            return e->id;
        }
        if (!strcmp(e->text, s)) return e->id;
    }
}

/* The profile's mappings (see the top): the trace's modules with a path,
 * one per distinct (path, base), the executable first. */
typedef struct pmap { const pst_module_t *m; uint64_t id; } pmap_t;

static int is_exe(const pst_module_t *m, const char *exe)
{
    return exe && *exe && m->path && !strcmp(m->path, exe);
}

static size_t mappings(const az_scan_t *s, pmap_t **out)
{
    size_t n = 0, k = 0;
    const pst_module_t *mods = s->r ? pst_modules(s->r, &n) : NULL;
    const char *exe = s->hdr ? s->hdr->exe : NULL;
    *out = NULL;
    if (!mods || !n || !(*out = calloc(n, sizeof **out))) return 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++) {
            const pst_module_t *m = &mods[i];
            if (!m->path || !*m->path || !m->size || is_exe(m, exe) != (pass == 0)) continue;
            size_t j = 0;
            while (j < k && !(out[0][j].m->base == m->base && !strcmp(out[0][j].m->path, m->path))) j++;
            if (j < k) continue;            /* mapped again at the same place: one mapping */
            out[0][k].m = m;
            out[0][k].id = k + 1;
            k++;
        }
    return k;
}

/* The mapping holding pc: the latest loaded of those whose range has it. */
static uint64_t mapping_of(const pmap_t *mp, size_t n, uint64_t pc)
{
    uint64_t id = 0, ts = 0;
    for (size_t i = 0; i < n; i++)
        if (pc >= mp[i].m->base && pc - mp[i].m->base < mp[i].m->size && (!id || mp[i].m->load_ts >= ts)) {
            id = mp[i].id;
            ts = mp[i].m->load_ts;
        }
    return id;
}

static uint64_t key_of(uint64_t a, uint64_t b) { return (a * 0x9E3779B97F4A7C15ull) ^ (b + 0x632be59bd9b4e019ull); }

int az_pprof_write(const az_scan_t *s, az_sym_t *sym, const az_export_opts_t *eo, FILE *out, char *msg,
                   size_t msglen)
{
    size_t n_sites = 0;
    const az_site_t *sites = az_sites(s->heap, &n_sites);
    az_sv_t *v = az_sv_create(s, sym, eo ? &eo->sites : NULL);
    static az_frame_t fr[4096];
    pbuf_t prof = { 0 }, locs = { 0 }, funcs = { 0 }, m = { 0 }, sub = { 0 };
    strtab_t st = { 0 };
    psc_map_t loc_ids = { 0 }, fn_ids = { 0 };
    pmap_t *mp = NULL;
    size_t n_mp = mappings(s, &mp);
    int rc = PSC_ENOMEM;
    if (!v || psc_map_init(&st.ids, sizeof(strent_t), 1024, 0, NULL) || psc_map_init(&loc_ids, sizeof(uint64_t), 1024, 0, NULL) ||
        psc_map_init(&fn_ids, sizeof(uint64_t), 1024, 0, NULL))
        goto out;
    field_bytes(&st.out, 6, "", 0);
    const char *types[4][2] = { { "alloc_objects", "count" }, { "alloc_space", "bytes" },
                                { "inuse_objects", "count" }, { "inuse_space", "bytes" } };
    for (int i = 0; i < 4; i++) {
        field_u(&m, 1, str_id(&st, types[i][0]));
        field_u(&m, 2, str_id(&st, types[i][1]));
        field_msg(&prof, 1, &m);
    }
    uint64_t n_locs = 0, n_fns = 0;
    for (size_t i = 0; i < n_sites; i++) {
        const az_site_t *si = &sites[i];
        if (!si->calls && !si->live_count) continue;
        size_t n = si->stack ? az_sv_frames(v, si->stack, fr, sizeof fr / sizeof fr[0]) : 0;
        if (n > sizeof fr / sizeof fr[0]) n = sizeof fr / sizeof fr[0];
        size_t inner = 0;
        while (inner < n && az_sv_skipped(v, &fr[inner])) inner++;
        if (inner == n) inner = 0;
        /* a sample: its locations innermost first, then its values */
        pbuf_t ids = { 0 };
        for (size_t k = inner; k < n;) {
            size_t e = k;                           /* the frames of one recorded frame */
            while (e < n && fr[e].level == fr[k].level) e++;
            uint64_t lk = key_of(fr[k].pc, (uint64_t)(e - k) << 32 | fr[k].level);
            int is_new;
            uint64_t *lid = psc_map_put(&loc_ids, lk, &is_new);
            if (!lid) { ids.oom = 1; break; }
            if (is_new) {
                *lid = ++n_locs;
                field_u(&m, 1, *lid);
                if (!fr[k].python) {
                    uint64_t mid = mapping_of(mp, n_mp, fr[k].pc);
                    if (mid) field_u(&m, 2, mid);
                    field_u(&m, 3, fr[k].pc);
                }
                for (size_t j = k; j < e; j++) {
                    char name[1400];
                    const char *fn = fr[j].function;
                    if (!fn) { az_sym_format(&fr[j], fr[j].pc, name, sizeof name); fn = name; }
                    uint64_t fname = str_id(&st, fn), ffile = str_id(&st, fr[j].file), fsys = fname;
                    if (fr[j].python) {
                        char sys_name[2800];
                        snprintf(sys_name, sizeof sys_name, "%s:%s", fr[j].file ? fr[j].file : "?", fn);
                        fsys = str_id(&st, sys_name);
                    }
                    /* a Python function and a native one of the same name and file stay two */
                    uint64_t *fid = psc_map_put(&fn_ids, key_of(fname, ffile) ^ (uint64_t)fr[j].python, &is_new);
                    if (!fid) { m.oom = 1; break; }
                    if (is_new) {
                        *fid = ++n_fns;
                        field_u(&sub, 1, *fid);
                        field_u(&sub, 2, fname);
                        field_u(&sub, 3, fsys);
                        field_u(&sub, 4, ffile);
                        field_msg(&funcs, 5, &sub);
                    }
                    field_u(&sub, 1, *fid);
                    field_u(&sub, 2, (uint64_t)(fr[j].line > 0 ? fr[j].line : 0));
                    field_msg(&m, 4, &sub);
                }
                field_msg(&locs, 4, &m);
            }
            varint(&ids, *lid);
            k = e;
        }
        if (ids.oom) { free(ids.p); goto out; }
        if (ids.n) field_bytes(&m, 1, ids.p, ids.n);   /* packed location ids */
        free(ids.p);
        pbuf_t vals = { 0 };
        varint(&vals, si->calls);
        varint(&vals, si->bytes);
        varint(&vals, si->live_count);
        varint(&vals, si->live_bytes);
        field_bytes(&m, 2, vals.p, vals.n);
        if (vals.oom) m.oom = 1;
        free(vals.p);
        field_msg(&prof, 2, &m);
    }
    for (size_t i = 0; i < n_mp; i++) {
        const pst_module_t *mo = mp[i].m;
        char bid[2 * 64 + 1];
        size_t bl = mo->build_id && mo->build_id_len <= 64 ? mo->build_id_len : 0;
        for (size_t b = 0; b < bl; b++) snprintf(bid + 2 * b, 3, "%02x", mo->build_id[b]);
        bid[2 * bl] = 0;
        field_u(&m, 1, mp[i].id);
        field_u(&m, 2, mo->base);
        field_u(&m, 3, mo->base + mo->size);
        field_u(&m, 5, str_id(&st, mo->path));
        if (bl) field_u(&m, 6, str_id(&st, bid));
        if (sym) {   /* the locations carry names, files and lines (symbolized here) */
            field_u(&m, 7, 1);
            field_u(&m, 8, 1);
            field_u(&m, 9, 1);
            field_u(&m, 10, 1);
        }
        field_msg(&prof, 3, &m);
    }
    put(&prof, locs.p, locs.n);
    put(&prof, funcs.p, funcs.n);
    put(&prof, st.out.p, st.out.n);
    if (s->hdr) field_u(&prof, 9, s->hdr->start_real_ns);
    field_u(&prof, 10, s->t_last - s->t_first);
    field_u(&prof, 14, str_id(&st, "alloc_space"));   /* (already in the table) */
    if (prof.oom || locs.oom || funcs.oom || st.out.oom || m.oom) goto out;

    /* gzip: deflate with a gzip header (windowBits 15 + 16) */
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) goto out;
    unsigned char zb[65536];
    z.next_in = prof.p;
    z.avail_in = (uInt)prof.n;
    int zr;
    do {
        z.next_out = zb;
        z.avail_out = sizeof zb;
        zr = deflate(&z, Z_FINISH);
        fwrite(zb, 1, sizeof zb - z.avail_out, out);
    } while (zr == Z_OK);
    deflateEnd(&z);
    rc = zr == Z_STREAM_END ? 0 : PSC_EIO;
out:
    if (rc) snprintf(msg, msglen, "%s", psc_strerror(rc));
    size_t it = 0;
    void *val;
    while (st.ids.slots && psc_map_next(&st.ids, &it, NULL, &val)) free(((strent_t *)val)->text);
    psc_map_free(&st.ids);
    psc_map_free(&loc_ids);
    psc_map_free(&fn_ids);
    free(mp);
    free(prof.p); free(locs.p); free(funcs.p); free(m.p); free(sub.p); free(st.out.p);
    az_sv_destroy(v);
    return rc;
}
