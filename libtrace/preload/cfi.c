/* cfi.c — the dwarf walk's fast path: our own CFI walker (stacks.c calls
 * ps_walk_cfi, and falls back to libunwind when it says -1).
 *
 * unw_backtrace spends ~80 instructions a frame (context save, cursor init,
 * its hashed frame cache). Most code addresses of a program unwind with one
 * of two simple rules, which the .eh_frame CFI row of the address gives:
 *   CFA = rsp + off  or  CFA = rbp + off;  return address at CFA - 8;
 *   the caller's rbp unchanged or saved at CFA + off2;  caller's rsp = CFA.
 * ps_walk_cfi interprets the CFI of an address once (eh_frame_hdr binary
 * search, CIE + FDE programs up to the address), keeps the rule in a global
 * direct-mapped cache (one 64-bit word per entry: written and read whole,
 * no lock) and steps frames with two loads each. Any address whose rule is
 * not of that shape (signal trampolines, DW_CFA_*_expression, other CFA
 * registers, no FDE, 'S' augmentation...) makes the whole walk fall back to
 * unw_backtrace, as does a frame of this library below the program's frames
 * or a read outside [sp, top of the thread's stack): the frames are those
 * unw_backtrace gives, never a guess. Return addresses are looked up at
 * address - 1 (the call may be the last instruction of a noreturn
 * function), the innermost frame (our own) at its address.
 * The cache is cleared when the module list loses an entry (dlclose). */
#include "preload.h"

#include <elf.h>
#include <link.h>
#include <string.h>

#define UR_OK     1ull    /* set in every cached rule */
#define UR_CFARBP 2ull    /* CFA = rbp + off (else rsp + off) */
#define UR_RBP    4ull    /* the caller's rbp is saved at CFA - 8 * k (else unchanged) */
#define UR_LAST   8ull    /* return address undefined: outermost frame */
#define UR_NONE   16ull   /* not expressible here: fall back to libunwind */
#define UR_CFA_SHIFT 5    /* 16 bits: CFA offset, 0..65535 */
#define UR_K_SHIFT   21   /* 9 bits: k of the rbp slot CFA - 8k */
#define UR_TAG_SHIFT 30   /* 34 bits: pc >> UR_BITS */
#define UR_BITS   13
#define UR_SLOTS  (1u << UR_BITS)
_Static_assert(UR_SLOTS == PS_UR_SLOTS, "preload.h sizes the rule cache");


void ps_ucache_clear(void)
{
    __atomic_add_fetch(&ps_g.stk.ucache_gen, 1, __ATOMIC_RELAXED);
    for (size_t i = 0; i < UR_SLOTS; i++) __atomic_store_n(&ps_g.stk.ucache[i], 0, __ATOMIC_RELAXED);
}

/* ---- CFI interpretation (slow path, once per code address) ---- */

static uint64_t uleb(const uint8_t **pp)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    unsigned sh = 0;
    uint8_t b;
    do { b = *p++; if (sh < 64) v |= (uint64_t)(b & 0x7f) << sh; sh += 7; } while (b & 0x80);
    *pp = p;
    return v;
}

static int64_t sleb(const uint8_t **pp)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    unsigned sh = 0;
    uint8_t b;
    do { b = *p++; if (sh < 64) v |= (uint64_t)(b & 0x7f) << sh; sh += 7; } while (b & 0x80);
    if (sh < 64 && (b & 0x40)) v |= ~0ull << sh;
    *pp = p;
    return (int64_t)v;
}

/* A DW_EH_PE-encoded pointer. Indirect values are not followed (only the
 * personality routine uses them, and it is skipped). -1: unsupported. */
static int rd_enc(const uint8_t **pp, unsigned enc, uintptr_t datarel, uint64_t *out)
{
    const uint8_t *p = *pp;
    uintptr_t at = (uintptr_t)p;
    uint64_t v;
    if (enc == 0xff) { *out = 0; return 0; }   /* DW_EH_PE_omit */
    switch (enc & 0x0f) {
    case 0x00: case 0x04: { uint64_t x; memcpy(&x, p, 8); v = x; p += 8; break; }
    case 0x0c:            { int64_t x; memcpy(&x, p, 8); v = (uint64_t)x; p += 8; break; }
    case 0x01: v = uleb(&p); break;
    case 0x09: v = (uint64_t)sleb(&p); break;
    case 0x02: { uint16_t x; memcpy(&x, p, 2); v = x; p += 2; break; }
    case 0x0a: { int16_t x; memcpy(&x, p, 2); v = (uint64_t)(int64_t)x; p += 2; break; }
    case 0x03: { uint32_t x; memcpy(&x, p, 4); v = x; p += 4; break; }
    case 0x0b: { int32_t x; memcpy(&x, p, 4); v = (uint64_t)(int64_t)x; p += 4; break; }
    default: return -1;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += at; break;        /* pcrel */
    case 0x30: v += datarel; break;   /* datarel (eh_frame_hdr) */
    default: return -1;
    }
    *pp = p;
    *out = v;
    return 0;
}

typedef struct obj_find { uintptr_t pc; const uint8_t *hdr; } obj_find_t;

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    obj_find_t *f = arg;
    const uint8_t *hdr = NULL;
    int in = 0;
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && f->pc >= a && f->pc < a + ph->p_memsz) in = 1;
        else if (ph->p_type == PT_GNU_EH_FRAME) hdr = (const uint8_t *)a;
    }
    if (!in) return 0;
    f->hdr = hdr;
    return 1;
}

enum { RK_SAME, RK_OFF, RK_UNDEF, RK_OTHER };
typedef struct cfi_row {
    int cfa_reg;          /* DWARF register, -1: an expression */
    int64_t cfa_off;
    int rbp_k, ra_k, rsp_k;
    int64_t rbp_off, ra_off;
} cfi_row_t;

static void set_reg(cfi_row_t *r, uint64_t reg, int kind, int64_t off)
{
    if (reg == 6) { r->rbp_k = kind; r->rbp_off = off; }
    else if (reg == 16) { r->ra_k = kind; r->ra_off = off; }
    else if (reg == 7) { r->rsp_k = kind; }
}

static void restore_reg(cfi_row_t *r, const cfi_row_t *init, uint64_t reg)
{
    if (reg == 6) { r->rbp_k = init->rbp_k; r->rbp_off = init->rbp_off; }
    else if (reg == 16) { r->ra_k = init->ra_k; r->ra_off = init->ra_off; }
    else if (reg == 7) { r->rsp_k = init->rsp_k; }
}

/* Runs a CFI program from *loc until the row covering pc is complete.
 * 0: done, -1: an instruction we do not handle. */
static int cfi_run(const uint8_t *p, const uint8_t *end, cfi_row_t *r, const cfi_row_t *init,
                   uint64_t *loc, uint64_t pc, uint64_t caf, int64_t daf, unsigned fenc)
{
    cfi_row_t stack[8];
    int sp = 0;
    while (p < end) {
        uint8_t op = *p++;
        uint64_t reg, d;
        switch (op >> 6) {
        case 1: *loc += (uint64_t)(op & 0x3f) * caf; if (*loc > pc) return 0; continue;
        case 2: set_reg(r, op & 0x3f, RK_OFF, (int64_t)uleb(&p) * daf); continue;
        case 3: restore_reg(r, init, op & 0x3f); continue;
        default: break;
        }
        switch (op) {
        case 0x00: break;                                               /* nop */
        case 0x01: if (rd_enc(&p, fenc, 0, loc)) return -1;            /* set_loc */
                   if (*loc > pc) return 0;
                   break;
        case 0x02: d = *p; p += 1; goto adv;                            /* advance_loc1 */
        case 0x03: { uint16_t x; memcpy(&x, p, 2); p += 2; d = x; goto adv; }
        case 0x04: { uint32_t x; memcpy(&x, p, 4); p += 4; d = x; goto adv; }
        adv:       *loc += d * caf; if (*loc > pc) return 0; break;
        case 0x05: reg = uleb(&p); set_reg(r, reg, RK_OFF, (int64_t)uleb(&p) * daf); break;
        case 0x06: restore_reg(r, init, uleb(&p)); break;
        case 0x07: set_reg(r, uleb(&p), RK_UNDEF, 0); break;
        case 0x08: set_reg(r, uleb(&p), RK_SAME, 0); break;
        case 0x09: reg = uleb(&p); (void)uleb(&p); set_reg(r, reg, RK_OTHER, 0); break;
        case 0x0a: if (sp >= 8) return -1; stack[sp++] = *r; break;    /* remember_state */
        case 0x0b: if (sp <= 0) return -1;                              /* restore_state */
                   *r = stack[--sp];   /* the CFA rule included (gcc's epilogues rely on it) */
                   break;
        case 0x0c: r->cfa_reg = (int)uleb(&p); r->cfa_off = (int64_t)uleb(&p); break;
        case 0x0d: r->cfa_reg = (int)uleb(&p); break;
        case 0x0e: r->cfa_off = (int64_t)uleb(&p); break;
        case 0x0f: d = uleb(&p); p += d; r->cfa_reg = -1; break;       /* def_cfa_expression */
        case 0x10: reg = uleb(&p); d = uleb(&p); p += d; set_reg(r, reg, RK_OTHER, 0); break;
        case 0x11: reg = uleb(&p); set_reg(r, reg, RK_OFF, sleb(&p) * daf); break;
        case 0x12: r->cfa_reg = (int)uleb(&p); r->cfa_off = sleb(&p) * daf; break;
        case 0x13: r->cfa_off = sleb(&p) * daf; break;
        case 0x14: reg = uleb(&p); (void)uleb(&p); set_reg(r, reg, RK_OTHER, 0); break;
        case 0x15: reg = uleb(&p); (void)sleb(&p); set_reg(r, reg, RK_OTHER, 0); break;
        case 0x16: reg = uleb(&p); d = uleb(&p); p += d; set_reg(r, reg, RK_OTHER, 0); break;
        case 0x2e: (void)uleb(&p); break;                               /* GNU_args_size */
        case 0x2f: reg = uleb(&p); set_reg(r, reg, RK_OFF, -(int64_t)uleb(&p) * daf); break;
        default: return -1;
        }
    }
    return 0;
}

/* The rule of code address pc (already "- 1" for return addresses). */
__attribute__((noinline, cold)) static uint64_t rule_compute(uintptr_t pc)
{
    const uint64_t NONE = UR_OK | UR_NONE;
    obj_find_t f = { pc, NULL };
    dl_iterate_phdr(find_cb, &f);
    const uint8_t *h = f.hdr;
    if (!h || h[0] != 1 || h[3] != 0x3b) return NONE;   /* table: datarel sdata4 */
    const uint8_t *p = h + 4;
    uint64_t ehf, count;
    if (rd_enc(&p, h[1], (uintptr_t)h, &ehf) || rd_enc(&p, h[2], (uintptr_t)h, &count) || !count)
        return NONE;
    /* binary search: the last entry whose start <= pc */
    size_t lo = 0, hi = count;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        int32_t s;
        memcpy(&s, p + mid * 8, 4);
        if ((uintptr_t)h + (intptr_t)s <= pc) lo = mid; else hi = mid;
    }
    int32_t s0, fo;
    memcpy(&s0, p + lo * 8, 4);
    memcpy(&fo, p + lo * 8 + 4, 4);
    if ((uintptr_t)h + (intptr_t)s0 > pc) return NONE;
    const uint8_t *fde = h + fo;
    uint32_t flen, clen;
    memcpy(&flen, fde, 4);
    if (flen == 0 || flen == 0xffffffffu) return NONE;
    const uint8_t *fend = fde + 4 + flen, *q = fde + 4;
    int32_t cptr;
    memcpy(&cptr, q, 4);
    const uint8_t *cie = q - cptr;
    q += 4;
    /* CIE */
    memcpy(&clen, cie, 4);
    if (clen == 0 || clen == 0xffffffffu) return NONE;
    const uint8_t *cend = cie + 4 + clen, *c = cie + 4;
    uint32_t cid;
    memcpy(&cid, c, 4);
    c += 4;
    if (cid != 0) return NONE;
    unsigned ver = *c++;
    if (ver != 1 && ver != 3) return NONE;
    const char *aug = (const char *)c;
    c += strlen(aug) + 1;
    uint64_t caf = uleb(&c);
    int64_t daf = sleb(&c);
    uint64_t ra_reg = ver == 1 ? *c++ : uleb(&c);
    unsigned fenc = 0;
    int has_z = aug[0] == 'z';
    if (has_z) {
        uint64_t alen = uleb(&c);
        const uint8_t *aend = c + alen;
        for (const char *a = aug + 1; *a; a++) {
            uint64_t dummy;
            if (*a == 'R') fenc = *c++;
            else if (*a == 'L') c++;
            else if (*a == 'P') { unsigned e = *c++; if (rd_enc(&c, e & 0x7f, 0, &dummy)) return NONE; }
            else return NONE;   /* 'S' (signal frame) or unknown */
        }
        c = aend;
    } else if (aug[0]) {
        return NONE;
    }
    if (ra_reg != 16) return NONE;
    /* FDE */
    uint64_t pc_begin, pc_range;
    if (rd_enc(&q, fenc, 0, &pc_begin) || rd_enc(&q, fenc & 0x0f, 0, &pc_range)) return NONE;
    if (pc < pc_begin || pc - pc_begin >= pc_range) return NONE;
    if (has_z) { uint64_t alen = uleb(&q); q += alen; }
    cfi_row_t init = { .cfa_reg = -2 }, row;
    uint64_t loc = 0;
    if (cfi_run(c, cend, &init, &init, &loc, UINT64_MAX, caf, daf, fenc)) return NONE;
    row = init;
    loc = pc_begin;
    if (cfi_run(q, fend, &row, &init, &loc, pc, caf, daf, fenc)) return NONE;
    /* the row at pc */
    uint64_t r = UR_OK;
    if (row.cfa_reg == 6) r |= UR_CFARBP;
    else if (row.cfa_reg != 7) return NONE;
    if (row.cfa_off < 0 || row.cfa_off > 0xffff) return NONE;
    r |= (uint64_t)row.cfa_off << UR_CFA_SHIFT;
    if (row.rsp_k != RK_SAME) return NONE;
    if (row.ra_k == RK_UNDEF) r |= UR_LAST;
    else if (row.ra_k != RK_OFF || row.ra_off != -8) return NONE;
    if (row.rbp_k == RK_OFF) {
        if (row.rbp_off >= 0 || (row.rbp_off & 7) || -row.rbp_off / 8 > 511) return NONE;
        r |= UR_RBP | (uint64_t)(-row.rbp_off / 8) << UR_K_SHIFT;
    } else if (row.rbp_k != RK_SAME) {
        return NONE;
    }
    return r;
}

static inline uint64_t rule_get(uintptr_t pc)
{
    uint64_t *e = &ps_g.stk.ucache[pc & (UR_SLOTS - 1)];
    uint64_t tag = (uint64_t)pc >> UR_BITS;
    uint64_t v = __atomic_load_n(e, __ATOMIC_RELAXED);
    if (PS_LIKELY(v >> UR_TAG_SHIFT == tag && v)) return v;
    uint64_t r = rule_compute(pc);
    if (tag < (1ull << (64 - UR_TAG_SHIFT)))
        __atomic_store_n(e, r | tag << UR_TAG_SHIFT, __ATOMIC_RELAXED);
    return r;
}

/* -1: use unw_backtrace. Reads only inside [sp at entry, top of the
 * thread's stack): every return address slot lies in [sp, cfa), so
 * sp + 8 <= cfa <= top, and the saved rbp slot below cfa and above the
 * walk's start.
 * Each step's state (ip, sp, bp) and what it gave (rule, cfa, rbp slot) is
 * kept in t->walk; a step whose state equals the recorded state of the same
 * step number takes the recorded results (functions of that state) instead
 * of looking the rule up: exact, and its loads do not wait for the previous
 * step's. Recorded steps are dropped when the rule cache is cleared. */
__attribute__((noinline)) int ps_walk_cfi(ps_thr_t *t, uint64_t *out, int max)
{
    uintptr_t ip, sp, bp;
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
                     : "=r"(ip), "=r"(sp), "=r"(bp));
    const uintptr_t hi = t->stk_hi;
    if (!hi || sp < t->stk_lo || sp >= hi || max <= 0) return -1;
    const uintptr_t base = sp;
    const uintptr_t slo = ps_g.self_lo, sspan = ps_g.self_hi - ps_g.self_lo;
    ps_walk_t *w = &t->walk;
    uint32_t gen = __atomic_load_n(&ps_g.stk.ucache_gen, __ATOMIC_RELAXED);
    if (PS_UNLIKELY(w->gen != gen)) { w->gen = gen; w->n = 0; }
    unsigned cn = w->n, j = 0;
    uint64_t *o = out, *const oend = out + max;
    int ret = -1;
    for (int steps = max + 16; steps > 0; steps--, j++) {
        if (ip - slo >= sspan) {
            *o++ = ip;
            if (o == oend) { ret = max; break; }
        } else if (o != out) {
            break;        /* our frame below the program's: rare, exact path */
        }
        ps_wstep_t *e = &w->st[j];
        uint64_t r;
        uintptr_t cfa, slot;
        if (j < cn && e->ip == ip && e->sp == sp && e->bp == bp) {
            r = e->r; cfa = e->cfa; slot = e->slot;
        } else {
            r = rule_get(ip - (j != 0));
            cfa = ((r & UR_CFARBP) ? bp : sp) + ((r >> UR_CFA_SHIFT) & 0xffff);
            slot = (r & UR_RBP) ? cfa - 8 * ((r >> UR_K_SHIFT) & 511) : 0;
            e->ip = ip; e->sp = sp; e->bp = bp; e->r = r; e->cfa = cfa; e->slot = slot;
            if (j >= cn) cn = j + 1;
        }
        if (PS_UNLIKELY(r & (UR_NONE | UR_LAST))) { if (!(r & UR_NONE)) ret = (int)(o - out); break; }
        if (cfa - 8 - sp > hi - 8 - sp) break;   /* cfa < sp + 8 or cfa > hi */
        if (slot) {
            if (slot < base) break;              /* k >= 1: slot <= hi - 8 */
            bp = *(const uintptr_t *)slot;
        }
        ip = ((const uintptr_t *)cfa)[-1];
        if (ip == 0) { ret = (int)(o - out); break; }
        sp = cfa;
    }
    w->n = cn;
    return ret;
}
