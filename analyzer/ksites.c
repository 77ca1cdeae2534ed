/* ksites.c — sites of KV blocks and mappings (see ksites.h).
 *
 * Per kind: a table stack id -> site index, the sites in an array, and the
 * live objects (key -> site index, bytes). What a site held at its kind's
 * peak is kept without copying every site at each new peak (as html.c
 * does): each peak has an epoch; before a site changes, if it has not
 * changed since the latest peak, its live bytes then are its live bytes
 * now, and are saved. A site untouched since the latest peak holds at the
 * peak what it holds now.
 */
#include "ksites.h"

#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "hashmap.h"
#include "poolscope/error.h"

typedef struct ksite {
    az_site_t s;
    uint64_t snap;               /* live bytes at the latest peak, when ep is that peak's epoch */
    uint32_t ep;
} ksite_t;

typedef struct kobj { uint32_t site; uint32_t pad; uint64_t bytes; } kobj_t;

typedef struct kind {
    psc_map_t by_stack;          /* stack id -> site index (u32) */
    psc_map_t live;              /* key -> kobj_t */
    ksite_t *sites;
    size_t n_sites, cap_sites;
    az_site_t *out;              /* az_ks_sites' answer */
    size_t cap_out;
    uint64_t live_bytes, peak;
    uint32_t E;                  /* epoch of the latest peak */
} kind_t;

struct az_ks {
    int counting;
    kind_t k[AZ_KS_N];
};

az_ks_t *az_ks_create(void)
{
    az_ks_t *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->counting = 1;
    for (int i = 0; i < AZ_KS_N; i++)
        if (psc_map_init(&k->k[i].by_stack, sizeof(uint32_t), 64, 0, NULL) ||
            psc_map_init(&k->k[i].live, sizeof(kobj_t), 256, 0, NULL)) {
            az_ks_destroy(k);
            return NULL;
        }
    return k;
}

void az_ks_destroy(az_ks_t *k)
{
    if (!k) return;
    for (int i = 0; i < AZ_KS_N; i++) {
        psc_map_free(&k->k[i].by_stack);
        psc_map_free(&k->k[i].live);
        free(k->k[i].sites);
        free(k->k[i].out);
    }
    free(k);
}

void az_ks_counting(az_ks_t *k, int on) { k->counting = on; }

static ksite_t *site_of(kind_t *d, uint32_t stack)
{
    int is_new;
    uint32_t *ix = psc_map_put_sz(&d->by_stack, stack, &is_new, sizeof(uint32_t));
    if (!ix) return NULL;
    if (!is_new) return &d->sites[*ix];
    if (psc_grow((void **)&d->sites, &d->cap_sites, d->n_sites, sizeof *d->sites, 64)) {
        psc_map_del(&d->by_stack, stack);
        return NULL;
    }
    ksite_t *s = &d->sites[d->n_sites];
    memset(s, 0, sizeof *s);
    s->s.stack = stack;
    s->ep = d->E;                /* held nothing at the latest peak */
    *ix = (uint32_t)d->n_sites++;
    return s;
}

/* Before a site's live bytes change: keep what it held at the latest peak. */
static void touch(kind_t *d, ksite_t *s)
{
    if (s->ep != d->E) { s->snap = s->s.live_bytes; s->ep = d->E; }
}

static void peak_check(az_ks_t *k, kind_t *d)
{
    if (k->counting && d->live_bytes > d->peak) { d->peak = d->live_bytes; d->E++; }
}

static void obj_gone(kind_t *d, kobj_t *ob)
{
    ksite_t *s = &d->sites[ob->site];
    touch(d, s);
    s->s.live_bytes -= ob->bytes;
    s->s.live_count--;
    d->live_bytes -= ob->bytes;
    psc_map_erase_sz(&d->live, ob, sizeof(kobj_t));
}

static int obj_add(az_ks_t *k, kind_t *d, uint64_t key, uint64_t bytes, uint32_t stack, int call)
{
    kobj_t *ob = psc_map_get_sz(&d->live, key, sizeof(kobj_t));
    if (ob) obj_gone(d, ob);     /* handed out again while live: the old one is gone */
    ksite_t *s = site_of(d, stack);
    if (!s) return PSC_ENOMEM;
    size_t si = (size_t)(s - d->sites);
    if (!(ob = psc_map_put_sz(&d->live, key, NULL, sizeof(kobj_t)))) return PSC_ENOMEM;
    s = &d->sites[si];
    *ob = (kobj_t){ .site = (uint32_t)si, .bytes = bytes };
    touch(d, s);
    s->s.live_bytes += bytes;
    s->s.live_count++;
    if (call && k->counting) { s->s.calls++; s->s.bytes += bytes; }
    d->live_bytes += bytes;
    peak_check(k, d);
    return 0;
}

static void obj_del(kind_t *d, uint64_t key)
{
    kobj_t *ob = psc_map_get_sz(&d->live, key, sizeof(kobj_t));
    if (ob) obj_gone(d, ob);
}

int az_ks_op(az_ks_t *k, const pm_op_t *o)
{
    switch ((pm_kind_t)o->kind) {
    case PM_KV_BLOCK_ALLOC: return obj_add(k, &k->k[AZ_KS_KV], o->key, o->bytes, o->stack, 1);
    case PM_KV_BLOCK_FREE: obj_del(&k->k[AZ_KS_KV], o->key); return 0;
    case PM_MAP_ADD:
        return obj_add(k, &k->k[o->flags & PM_F_FILE ? AZ_KS_MMAP_FILE : AZ_KS_MMAP_ANON], o->key, o->bytes,
                       o->stack, !(o->flags & PM_F_REST));
    case PM_MAP_DEL: obj_del(&k->k[o->flags & PM_F_FILE ? AZ_KS_MMAP_FILE : AZ_KS_MMAP_ANON], o->key); return 0;
    default: return 0;
    }
}

const az_site_t *az_ks_sites(az_ks_t *k, int kind, size_t *n)
{
    *n = 0;
    if (kind < 0 || kind >= AZ_KS_N) return NULL;
    kind_t *d = &k->k[kind];
    if (psc_grow((void **)&d->out, &d->cap_out, d->n_sites ? d->n_sites - 1 : 0, sizeof *d->out, 64)) return NULL;
    size_t m = 0;
    for (size_t i = 0; i < d->n_sites; i++) {
        const ksite_t *s = &d->sites[i];
        az_site_t x = s->s;
        x.peak_bytes = d->peak ? (s->ep == d->E ? s->snap : s->s.live_bytes) : 0;
        if (!x.calls && !x.live_bytes && !x.peak_bytes) continue;
        d->out[m++] = x;
    }
    *n = m;
    return d->out;
}

uint64_t az_ks_peak(const az_ks_t *k, int kind)
{
    return kind >= 0 && kind < AZ_KS_N ? k->k[kind].peak : 0;
}
