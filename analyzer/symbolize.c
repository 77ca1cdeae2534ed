/* symbolize.c — offline symbolization through libdwfl and libdw (see
 * symbolize.h).
 *
 * One Dwfl session, modules reported with dwfl_report_elf at the address of
 * their first PT_LOAD (add_p_vaddr = true, so prelinked or non-zero p_vaddr
 * files land right). A file that cannot be opened is skipped: its addresses
 * come out as module+offset.
 *
 * Inline chains: dwfl_module_addrdie gives the CU of the address,
 * dwarf_getscopes its innermost scope, dwarf_getscopes_die the DIEs that
 * contain that one, innermost first; each
 * DW_TAG_inlined_subroutine is one displayed frame (its abstract origin
 * names it), the DW_TAG_subprogram that ends the walk the physical one. The
 * innermost frame takes the line table's file:line; each outer one the
 * DW_AT_call_file/DW_AT_call_line of the inlined DIE just inside it. Names
 * prefer DW_AT_linkage_name (demangled, so C++ names carry their class,
 * template arguments and parameters, as addr2line -C prints them), then
 * DW_AT_name, then the symbol table.
 *
 * Memo: looked-up address -> (first, count) in one array of chain frames;
 * a second map remembers which recorded addresses are signal trampolines.
 *
 * Which file a module is read from (symbolize.h): each candidate is opened
 * with libelf and its build-id (dwelf_elf_gnu_build_id) compared with the
 * recorded one before libdwfl sees it: dwfl_report_elf itself takes any
 * file, and would look a stripped file's debuginfo up by the file's own
 * build-id, so a rebuilt program would be named from the new build
 * silently.
 */
#include "symbolize.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "demangle.h"
#include "escape.h"
#include "grow.h"
#include "hashmap.h"
#include "poolscope/error.h"
#include "strkeep.h"

typedef struct chain_ref { uint32_t first, count; } chain_ref_t;

/* A module's symbols sorted by address, built on its first lookup.
 * elfutils' address-to-symbol search walks the module's whole table on
 * each call: on a PyTorch trace (libtorch_cpu: 34,926 symbols, looked up
 * at 76,523 addresses) that made `report` take minutes. */
typedef struct msym { uint64_t addr, size; const char *name; int rank; } msym_t;
typedef struct modsyms { Dwfl_Module *mod; msym_t *v; size_t n; } modsyms_t;

/* A Python file and the part of its path labels show (a suffix of it). */
typedef struct pyfile { const char *path, *shown; } pyfile_t;

struct az_sym {
    Dwfl *dwfl;
    Dwfl_Callbacks cb;
    char *debuginfo_path;
    struct { uint64_t base, size; char *name; int stale;
             const char *path, *build_id;   /* for the note on a module without symbols */
             int nosym_said; } *mods;
    size_t n_mods;
    psc_map_t cache;             /* looked-up address -> chain_ref_t */
    psc_map_t tramp;             /* recorded address -> 1 trampoline, 2 not */
    az_frame_t *fr;              /* every chain, back to back */
    size_t n_fr, cap_fr;
    psc_strs_t strs;             /* owned strings */
    modsyms_t *ms;               /* per module: its sorted symbols */
    size_t n_ms, cap_ms;
    const pst_reader_t *r;       /* az_sym_open: the strings that name Python frames */
    pst_reader_t *owned;         /* az_sym_adopt: closed with the symbolizer */
    pyfile_t *pyf;               /* the trace's .py files, by path (pyfiles()) */
    size_t n_pyf;
    int pyf_done;
    const char **notes;          /* az_sym_note: kept strings */
    size_t n_notes, cap_notes;
};

/* The process's settings (symbolize.h says why they are not per
 * symbolizer): --debug-dir, --binary, where messages go, and which were
 * given already. */
static struct {
    char **dirs;                 /* absolute */
    size_t n_dirs;
    struct { char *path, *file; } *bins;
    size_t n_bins;
    void (*warn)(void *ctx, const char *msg);
    void *warn_ctx;
    char **said;                 /* messages given, once each */
    size_t n_said;
    /* what dpkg said owns each file asked about (pkg NULL: no package);
     * process-wide because report opens more than one symbolizer on a
     * trace (suppressions, the text) and each dpkg run costs 0.6 s */
    struct { char *path, *pkg; } *owners;
    size_t n_owners;
} g_set;

int az_sym_add_debug_dir(const char *dir)
{
    if (!dir || !*dir) return PSC_EINVAL;
    char abs[PATH_MAX];
    const char *d = realpath(dir, abs) ? abs : dir;   /* a missing one is searched in vain */
    char **a = realloc(g_set.dirs, (g_set.n_dirs + 1) * sizeof *a);
    if (!a) return PSC_ENOMEM;
    g_set.dirs = a;
    if (!(a[g_set.n_dirs] = strdup(d))) return PSC_ENOMEM;
    g_set.n_dirs++;
    return 0;
}

int az_sym_add_binary(const char *spec)
{
    const char *eq = spec ? strchr(spec, '=') : NULL;
    if (!eq || eq == spec || !eq[1]) return PSC_EINVAL;
    void *a = realloc(g_set.bins, (g_set.n_bins + 1) * sizeof *g_set.bins);
    if (!a) return PSC_ENOMEM;
    g_set.bins = a;
    char *path = strndup(spec, (size_t)(eq - spec)), *file = strdup(eq + 1);
    if (!path || !file) { free(path); free(file); return PSC_ENOMEM; }
    g_set.bins[g_set.n_bins].path = path;
    g_set.bins[g_set.n_bins].file = file;
    g_set.n_bins++;
    return 0;
}

void az_sym_set_warn(void (*fn)(void *ctx, const char *msg), void *ctx)
{
    g_set.warn = fn;
    g_set.warn_ctx = ctx;
}

void az_sym_reset_settings(void)
{
    for (size_t i = 0; i < g_set.n_dirs; i++) free(g_set.dirs[i]);
    for (size_t i = 0; i < g_set.n_bins; i++) { free(g_set.bins[i].path); free(g_set.bins[i].file); }
    for (size_t i = 0; i < g_set.n_said; i++) free(g_set.said[i]);
    free(g_set.dirs);
    free(g_set.bins);
    free(g_set.said);
    for (size_t i = 0; i < g_set.n_owners; i++) { free(g_set.owners[i].path); free(g_set.owners[i].pkg); }
    free(g_set.owners);
    memset(&g_set, 0, sizeof g_set);
}

static const char *keep(az_sym_t *s, const char *str) { return psc_strs_keep(&s->strs, str); }

/* The demangled form of a name, kept. */
static const char *keep_name(az_sym_t *s, const char *name)
{
    if (!name) return NULL;
    char buf[32768];   /* a C++ name of template arguments runs to thousands of characters: kept whole */
    return keep(s, az_dm_name(name, buf, sizeof buf));
}

/* A message about a module: kept for az_sym_note, and given once per
 * process (the same text from a second symbolizer of the same trace is
 * not repeated). */
static void keep_note(az_sym_t *s, const char *msg)
{
    const char *k = keep(s, msg);
    if (k) (void)psc_grow((void **)&s->notes, &s->cap_notes, s->n_notes, sizeof *s->notes, 8);
    if (k && s->n_notes < s->cap_notes) s->notes[s->n_notes++] = k;
}

static void note(az_sym_t *s, const char *msg)
{
    keep_note(s, msg);
    for (size_t i = 0; i < g_set.n_said; i++)
        if (!strcmp(g_set.said[i], msg)) return;
    char **a = realloc(g_set.said, (g_set.n_said + 1) * sizeof *a);
    if (a) {
        g_set.said = a;
        if ((a[g_set.n_said] = strdup(msg))) g_set.n_said++;
    }
    if (g_set.warn) g_set.warn(g_set.warn_ctx, msg);
    else fprintf(stderr, "poolscope: %s\n", msg);
}

const char *az_sym_note(const az_sym_t *s, size_t i)
{
    return s && i < s->n_notes ? s->notes[i] : NULL;
}

static void hex(const uint8_t *b, size_t n, char *out, size_t len)
{
    size_t k = 0;
    out[0] = 0;
    for (size_t i = 0; i < n && k + 3 <= len; i++, k += 2) snprintf(out + k, 3, "%02x", b[i]);
}

enum { FILE_OK, FILE_MISSING, FILE_DIFFERS };

/* Is file the build the trace recorded as m? FILE_OK; FILE_MISSING when it
 * cannot be read as ELF; FILE_DIFFERS with *why saying how. loaded_real_ns:
 * when the module was mapped (CLOCK_REALTIME ns), 0 unknown or not to be
 * checked (a copy given with --binary has its own mtime). */
static int check_file(const char *file, const pst_module_t *m, uint64_t loaded_real_ns, char *why, size_t len)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);   /* a FIFO named in a hostile trace must not block */
    if (fd < 0) return FILE_MISSING;
    int rc = FILE_MISSING;
    struct stat st;
    Elf *e = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? elf_begin(fd, ELF_C_READ_MMAP, NULL) : NULL;
    if (e && elf_kind(e) == ELF_K_ELF) {
        rc = FILE_OK;
        const void *bid = NULL;
        ssize_t bl = dwelf_elf_gnu_build_id(e, &bid);
        char want[160], got[160];
        if (m->build_id_len) {
            if (bl != (ssize_t)m->build_id_len || memcmp(bid, m->build_id, m->build_id_len)) {
                hex(m->build_id, m->build_id_len, want, sizeof want);
                if (bl > 0) hex(bid, (size_t)bl, got, sizeof got);
                snprintf(why, len, "its build-id is %s, the trace's %s", bl > 0 ? got : "none", want);
                rc = FILE_DIFFERS;
            }
        } else {
            /* no build-id recorded: the extent of the PT_LOAD segments (what
             * the tracer recorded as the module's size), then the mtime */
            size_t nph = 0;
            uint64_t lo = UINT64_MAX, hi = 0;
            if (elf_getphdrnum(e, &nph) == 0)
                for (size_t i = 0; i < nph; i++) {
                    GElf_Phdr ph;
                    if (!gelf_getphdr(e, (int)i, &ph) || ph.p_type != PT_LOAD) continue;
                    if (ph.p_vaddr < lo) lo = ph.p_vaddr;
                    if (ph.p_vaddr + ph.p_memsz > hi) hi = ph.p_vaddr + ph.p_memsz;
                }
            uint64_t mt = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
            if (m->size && hi > lo && hi - lo != m->size) {
                snprintf(why, len, "no build-id recorded; its segments span %llu bytes, the trace's %llu",
                         (unsigned long long)(hi - lo), (unsigned long long)m->size);
                rc = FILE_DIFFERS;
            } else if (loaded_real_ns && mt > loaded_real_ns) {
                snprintf(why, len, "no build-id recorded; the file was modified after it was loaded");
                rc = FILE_DIFFERS;
            }
        }
    }
    if (e) elf_end(e);
    close(fd);
    return rc;
}

/* The file to read for module m into buf (NULL: none fits), *stale set
 * when a file was there but is another build. Messages through note(). */
static const char *choose_file(az_sym_t *s, const pst_module_t *m, uint64_t loaded_real_ns, char *buf,
                               size_t len, int *stale)
{
    char why[512], e1[1200], e2[1200], e3[1200], msg[4000];
    *stale = 0;
    const char *base = strrchr(m->path, '/');
    base = base ? base + 1 : m->path;
    for (size_t i = 0; i < g_set.n_bins; i++) {
        const char *p = g_set.bins[i].path;
        if (strcmp(p, m->path) && (strchr(p, '/') || strcmp(p, base))) continue;
        const char *f = g_set.bins[i].file;
        int rc = check_file(f, m, 0, why, sizeof why);
        if (rc == FILE_OK) { snprintf(buf, len, "%s", f); return buf; }
        snprintf(msg, sizeof msg, "--binary %s: not used for %s: %s", psc_esc_text(f, e1, sizeof e1),
                 psc_esc_text(m->path, e2, sizeof e2), rc == FILE_MISSING ? "not an ELF file one can read" : why);
        note(s, msg);
    }
    int rc = check_file(m->path, m, loaded_real_ns, why, sizeof why);
    if (rc == FILE_OK) { snprintf(buf, len, "%s", m->path); return buf; }
    if (m->build_id_len) {
        char h[160];
        hex(m->build_id, m->build_id_len, h, sizeof h);
        for (size_t i = 0; i <= g_set.n_dirs; i++) {
            const char *d = i < g_set.n_dirs ? g_set.dirs[i] : "/usr/lib/debug";
            snprintf(buf, len, "%s/.build-id/%.2s/%s.debug", d, h, h + 2);
            char w2[512];
            if (check_file(buf, m, 0, w2, sizeof w2) == FILE_OK) return buf;
        }
    }
    if (rc == FILE_DIFFERS) {
        *stale = 1;
        if (strstr(base, "poolscope-preload")) return NULL;   /* the tracer: its frames are never shown */
        snprintf(msg, sizeof msg, "%s is not the build the trace recorded (%s): its frames are shown as "
                 "%s+0xOFFSET [binary changed]; --binary %s=FILE or --debug-dir DIR names the right one",
                 psc_esc_text(m->path, e1, sizeof e1), why, psc_esc_text(base, e2, sizeof e2),
                 psc_esc_text(m->path, e3, sizeof e3));
        note(s, msg);
    }
    return NULL;
}

/* Run `dpkg -S` on the n files (without a shell: the paths come from the
 * trace) and return what it printed, NUL-terminated (NULL when dpkg could
 * not run or failed outright). Exit status 1 only says that some file is
 * owned by no package: the others' lines are still there. */
static char *dpkg_search(char *const *files, size_t n)
{
    char **argv = calloc(n + 3, sizeof *argv);
    if (!argv) return NULL;
    argv[0] = "dpkg";
    argv[1] = "-S";
    for (size_t i = 0; i < n; i++) argv[i + 2] = files[i];
    int fd[2];
    if (pipe(fd)) { free(argv); return NULL; }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclose(&fa, fd[0]);
    pid_t pid;
    extern char **environ;
    int rc = posix_spawnp(&pid, "dpkg", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    free(argv);
    close(fd[1]);
    char *out = NULL;
    size_t len = 0, cap = 0;
    int oom = 0;
    while (!rc) {
        if (cap - len < 4097) {
            char *b = realloc(out, cap ? cap * 2 : 8192);
            if (!b) { oom = 1; break; }   /* read on to the end so that dpkg is not stopped by the pipe */
            out = b;
            cap = cap ? cap * 2 : 8192;
        }
        ssize_t k = read(fd[0], out + len, cap - len - 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        len += (size_t)k;
    }
    if (oom) { char sink[4096]; while (read(fd[0], sink, sizeof sink) > 0) {} }
    close(fd[0]);
    if (rc) { free(out); return NULL; }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (oom || !out || !WIFEXITED(st) || WEXITSTATUS(st) > 1) { free(out); return NULL; }
    out[len] = 0;
    return out;
}

/* The package dpkg's output names for file, into pkg without its ":arch";
 * 0, or -1 when no line is about file. Lines are "pkg[:arch][, pkg2...]:
 * /path"; the first line about file counts (a diverted file's first line
 * names the diversion, as it did when dpkg -S was run on the file alone). */
static int dpkg_find(const char *out, const char *file, char *pkg, size_t len)
{
    size_t fl = strlen(file);
    for (const char *l = out; l && *l; ) {
        const char *nl = strchr(l, '\n');
        size_t ll = nl ? (size_t)(nl - l) : strlen(l);
        const char *sep = memchr(l, ':', ll);
        /* the path starts after the first ": " of the line */
        while (sep && !(sep + 1 < l + ll && sep[1] == ' ')) sep = memchr(sep + 1, ':', (size_t)(l + ll - sep - 1));
        if (sep && (size_t)(l + ll - (sep + 2)) == fl && !memcmp(sep + 2, file, fl)) {
            size_t e = strcspn(l, ":, \n");
            if (!e || e >= len) return -1;
            memcpy(pkg, l, e);
            pkg[e] = 0;
            return 0;
        }
        l = nl ? nl + 1 : NULL;
    }
    return -1;
}

/* The Debian package that installed file, into pkg without its ":arch";
 * 0, or -1 when dpkg is not there or owns no such file. One `dpkg -S` for
 * a single file, used for a path dpkg would read as a pattern. */
static int dpkg_owner(const char *file, char *pkg, size_t len)
{
    char *f = (char *)file;
    char *out = dpkg_search(&f, 1);
    int rc = out ? dpkg_find(out, file, pkg, len) : -1;
    free(out);
    return rc;
}

/* Whether dpkg -S reads arg as a literal path (an absolute one without
 * its pattern characters), so that its output line names arg itself. */
static int dpkg_literal(const char *arg)
{
    return arg[0] == '/' && !strpbrk(arg, "*?[\\");
}

/* The owner dpkg gave for file: its g_set.owners entry, or NULL when
 * file was never asked about. */
static const char **owner_of(const char *file)
{
    for (size_t i = 0; i < g_set.n_owners; i++)
        if (!strcmp(g_set.owners[i].path, file)) return (const char **)&g_set.owners[i].pkg;
    return NULL;
}

/* Remember what dpkg's output out says of file (out NULL: dpkg did not
 * run; remembered as no package, as a run of its own would say). */
static void owner_keep(const char *out, const char *file)
{
    if (owner_of(file)) return;
    void *a = realloc(g_set.owners, (g_set.n_owners + 1) * sizeof *g_set.owners);
    if (!a) return;
    g_set.owners = a;
    char pkg[256];
    char *path = strdup(file);
    char *owner = out && !dpkg_find(out, file, pkg, sizeof pkg) ? strdup(pkg) : NULL;
    if (!path) { free(owner); return; }
    g_set.owners[g_set.n_owners].path = path;
    g_set.owners[g_set.n_owners++].pkg = owner;
}

/* Ask dpkg in one run about every module's file (and its real path,
 * where a link leads elsewhere) that it was not asked about yet, the
 * first time a module without symbols needs an owner: dpkg reads its
 * whole database on each run (0.6 s here), and a PyTorch trace has 77
 * modules without symbols, which made `report` spend a minute and more
 * in dpkg. */
static void dpkg_batch(az_sym_t *s)
{
    char **files = calloc(2 * s->n_mods + 1, sizeof *files);
    if (!files) return;
    size_t n = 0;
    for (size_t i = 0; i < s->n_mods; i++) {
        const char *p = s->mods[i].path;
        if (!p || !dpkg_literal(p)) continue;
        if (!owner_of(p)) files[n++] = (char *)p;
        char real[PATH_MAX];
        if (realpath(p, real) && strcmp(real, p) && dpkg_literal(real) && !owner_of(real)) {
            const char *k = keep(s, real);
            if (k) files[n++] = (char *)k;
        }
    }
    char *out = n ? dpkg_search(files, n) : NULL;
    for (size_t i = 0; i < n; i++) owner_keep(out, files[i]);
    free(out);
    free(files);
}

/* The package that installed file: from what dpkg said of it in a
 * batch, else from a run of its own. */
static int module_owner(az_sym_t *s, const char *file, char *pkg, size_t len)
{
    if (!dpkg_literal(file)) return dpkg_owner(file, pkg, len);
    const char **o = owner_of(file);
    if (!o) {
        dpkg_batch(s);
        if (!(o = owner_of(file))) return dpkg_owner(file, pkg, len);
    }
    if (!*o || strlen(*o) >= len) return -1;
    strcpy(pkg, *o);
    return 0;
}

/* Once per module and symbolizer whose frames have no name (no DWARF, no
 * symbol table entry: a stripped file): what to install or where its
 * debug file goes, kept for az_sym_note.
 * Debian names a package's debug symbols PKG-dbgsym (in the debug archive;
 * a few packages ship PKG-dbg instead), installed under
 * /usr/lib/debug/.build-id, which is searched. */
static void nosym_note(az_sym_t *s, size_t i)
{
    if (s->mods[i].nosym_said || !s->mods[i].path || s->mods[i].path[0] != '/' ||
        strstr(s->mods[i].name, "poolscope-preload"))
        return;
    s->mods[i].nosym_said = 1;
    char pkg[256], where[400], e1[1200], e2[1200], msg[4000];
    int owned = module_owner(s, s->mods[i].path, pkg, sizeof pkg) == 0;
    if (!owned) {
        char real[PATH_MAX];
        if (realpath(s->mods[i].path, real) && strcmp(real, s->mods[i].path))
            owned = module_owner(s, real, pkg, sizeof pkg) == 0;
    }
    const char *bid = s->mods[i].build_id;
    if (bid && strlen(bid) > 2) snprintf(where, sizeof where, "/usr/lib/debug/.build-id/%.2s/%s.debug", bid, bid + 2);
    else snprintf(where, sizeof where, "(no build-id recorded: none is looked up)");
    if (owned)
        snprintf(msg, sizeof msg, "%s has no symbols: its frames show as %s+0xOFFSET; install %s-dbgsym "
                 "(dpkg -S: package %s; from Debian's debug archive; some packages ship %s-dbg), "
                 "which puts its debug file at %s", psc_esc_text(s->mods[i].path, e1, sizeof e1),
                 psc_esc_text(s->mods[i].name, e2, sizeof e2), pkg, pkg, pkg, where);
    else
        snprintf(msg, sizeof msg, "%s has no symbols: its frames show as %s+0xOFFSET; no package owns it "
                 "(dpkg -S); looked for its debug file at %s (--debug-dir DIR looks in "
                 "DIR/.build-id too; --binary PATH=FILE names an unstripped copy)",
                 psc_esc_text(s->mods[i].path, e1, sizeof e1), psc_esc_text(s->mods[i].name, e2, sizeof e2), where);
    /* advice, not a fault: in the report (Symbols, symbol_notes), not on
     * every command's stderr as a changed binary is */
    keep_note(s, msg);
}

/* libdwfl's debuginfo search path: the module's own directory and its
 * .debug (for .gnu_debuglink), then each --debug-dir and /usr/lib/debug
 * (absolute entries are also searched by build-id: .build-id/xx/yyyy.debug). */
static char *debuginfo_path(void)
{
    size_t n = sizeof ":.debug:/usr/lib/debug";
    for (size_t i = 0; i < g_set.n_dirs; i++) n += strlen(g_set.dirs[i]) + 1;
    char *p = malloc(n);
    if (!p) return NULL;
    strcpy(p, ":.debug");
    for (size_t i = 0; i < g_set.n_dirs; i++) { strcat(p, ":"); strcat(p, g_set.dirs[i]); }
    strcat(p, ":/usr/lib/debug");
    return p;
}

static az_sym_t *create(const pst_module_t *mods, size_t n, const pst_header_t *hd)
{
    az_sym_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    elf_version(EV_CURRENT);
    s->cb.find_elf = dwfl_build_id_find_elf;
    s->cb.find_debuginfo = dwfl_standard_find_debuginfo;
    s->debuginfo_path = debuginfo_path();
    s->cb.debuginfo_path = &s->debuginfo_path;
    s->dwfl = dwfl_begin(&s->cb);
    int rc = psc_map_init(&s->cache, sizeof(chain_ref_t), 512, 50, NULL);
    if (!rc) rc = psc_map_init(&s->tramp, sizeof(int), 512, 50, NULL);
    s->mods = calloc(n ? n : 1, sizeof *s->mods);
    if (rc || !s->mods) { az_sym_destroy(s); return NULL; }
    if (s->dwfl) dwfl_report_begin(s->dwfl);
    /* the latest map at a base wins: report from the end, skip bases seen */
    for (size_t i = n; i-- > 0;) {
        const pst_module_t *m = &mods[i];
        if (!m->path || !m->path[0]) continue;
        int dup = 0;
        for (size_t k = 0; k < s->n_mods && !dup; k++) dup = s->mods[k].base == m->base;
        if (dup) continue;
        const char *slash = strrchr(m->path, '/');
        s->mods[s->n_mods].base = m->base;
        s->mods[s->n_mods].size = m->size;
        s->mods[s->n_mods].name = (char *)keep(s, slash ? slash + 1 : m->path);
        s->mods[s->n_mods].path = keep(s, m->path);
        if (m->build_id_len && m->build_id_len <= 64) {
            char h[160];
            hex(m->build_id, m->build_id_len, h, sizeof h);
            s->mods[s->n_mods].build_id = keep(s, h);
        }
        s->n_mods++;
        if (s->dwfl && m->path[0] == '/' && strncmp(m->path, "linux-vdso", 10) != 0) {
            char file[PATH_MAX + 64];
            uint64_t loaded = hd && hd->start_real_ns ? hd->start_real_ns + m->load_ts : 0;
            const char *f = choose_file(s, m, loaded, file, sizeof file, &s->mods[s->n_mods - 1].stale);
            if (f) dwfl_report_elf(s->dwfl, s->mods[s->n_mods - 1].name, f, -1, m->base, true);
        }
    }
    if (s->dwfl) dwfl_report_end(s->dwfl, NULL, NULL);
    return s;
}

az_sym_t *az_sym_create(const pst_module_t *mods, size_t n)
{
    return create(mods, n, NULL);
}

az_sym_t *az_sym_open(const pst_reader_t *r)
{
    size_t n = 0;
    const pst_module_t *mods = pst_modules(r, &n);
    az_sym_t *s = create(mods, n, pst_header(r));
    if (s) s->r = r;
    return s;
}

void az_sym_adopt(az_sym_t *s, pst_reader_t *r)
{
    s->owned = r;
}

void az_sym_destroy(az_sym_t *s)
{
    if (!s) return;
    pst_close(s->owned);
    if (s->dwfl) dwfl_end(s->dwfl);
    psc_strs_free(&s->strs);
    free(s->fr);
    psc_map_free(&s->cache);
    psc_map_free(&s->tramp);
    for (size_t i = 0; i < s->n_ms; i++) free(s->ms[i].v);
    free(s->ms);
    free(s->pyf);
    free(s->mods);
    free(s->notes);
    free(s->debuginfo_path);
    free(s);
}

static az_frame_t *push(az_sym_t *s)
{
    if (psc_grow((void **)&s->fr, &s->cap_fr, s->n_fr, sizeof *s->fr, 1024)) return NULL;
    az_frame_t *f = &s->fr[s->n_fr++];
    memset(f, 0, sizeof *f);
    return f;
}

/* A function DIE's linkage name, following DW_AT_abstract_origin /
 * DW_AT_specification; NULL when it has none. */
static const char *die_linkage_name(Dwarf_Die *d)
{
    Dwarf_Attribute a;
    const char *n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_linkage_name, &a));
    if (!n) n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_MIPS_linkage_name, &a));
    return n;
}

/* A function DIE's name: linkage name, else DW_AT_name. */
static const char *die_name(Dwarf_Die *d)
{
    Dwarf_Attribute a;
    const char *n = die_linkage_name(d);
    if (!n) n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_name, &a));
    return n;
}

static int is_cxx(Dwarf_Die *cu)
{
    int l = dwarf_srclang(cu);
    /* 0x2a, 0x2b: DW_LANG_C_plus_plus_17 and _20 (DWARF 6 drafts), not in
     * every dwarf.h */
    return l == DW_LANG_C_plus_plus || l == DW_LANG_C_plus_plus_03 || l == DW_LANG_C_plus_plus_11 ||
           l == DW_LANG_C_plus_plus_14 || l == 0x2a || l == 0x2b;
}

static int msym_cmp(const void *x, const void *y)
{
    const msym_t *a = x, *b = y;
    if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
    return a->rank - b->rank;
}

static modsyms_t *syms_of(az_sym_t *s, Dwfl_Module *mod)
{
    for (size_t i = 0; i < s->n_ms; i++)
        if (s->ms[i].mod == mod) return &s->ms[i];
    if (psc_grow((void **)&s->ms, &s->cap_ms, s->n_ms, sizeof *s->ms, 16)) return NULL;
    modsyms_t *m = &s->ms[s->n_ms++];
    m->mod = mod;
    m->v = NULL;
    m->n = 0;
    int n = dwfl_module_getsymtab(mod);
    if (n <= 1 || !(m->v = malloc((size_t)n * sizeof *m->v))) return m;
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);
        if (!name || !*name || sym.st_shndx == SHN_UNDEF || !addr) continue;
        if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) continue;
        /* at one address: a global name before a weak one before a local one */
        int rank = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2;
        m->v[m->n++] = (msym_t){ addr, sym.st_size, name, rank };
    }
    qsort(m->v, m->n, sizeof *m->v, msym_cmp);
    return m;
}

/* The symbol containing address a of module mod (the nearest one at or
 * below it whose size covers it, or a sizeless one), with *off its offset
 * into it; NULL when none. */
static const char *sym_at(az_sym_t *s, Dwfl_Module *mod, uint64_t a, uint64_t *off)
{
    modsyms_t *m = syms_of(s, mod);
    if (!m || !m->n) return NULL;
    size_t lo = 0, hi = m->n;           /* first entry with addr > a */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->v[mid].addr <= a) lo = mid + 1; else hi = mid;
    }
    for (size_t i = lo, k = 0; i-- > 0 && k < 64; k++) {
        const msym_t *e = &m->v[i];
        if (e->size && a - e->addr >= e->size) continue;
        while (i > 0 && m->v[i - 1].addr == e->addr) e = &m->v[--i];   /* the best name at that address */
        if (off) *off = a - e->addr;
        return e->name;
    }
    return NULL;
}

/* The last k components of path ("a/b/c.py", 2: "b/c.py"); the whole
 * path when it has no more. */
static const char *suffix(const char *path, int k)
{
    const char *p = path + strlen(path);
    while (p > path) {
        if (p[-1] == '/' && --k == 0) return p;
        p--;
    }
    return path;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const pyfile_t *)a)->path, ((const pyfile_t *)b)->path);
}

static int by_base(const void *a, const void *b)
{
    const pyfile_t *x = a, *y = b;
    int c = strcmp(suffix(x->path, 1), suffix(y->path, 1));
    return c ? c : strcmp(x->path, y->path);
}

/* Every .py file the trace's Python frames name (the file part of each
 * "qualname\nfile" string), each shown as the shortest tail of its path
 * that no other of them ends with: "module.py" while it is the only one,
 * "a/__init__.py" beside "b/__init__.py". Labels name files, and rows
 * merge by label: a bare base name would merge two packages' lines. Built
 * once, from the strings defined when the first Python frame is named
 * (the analyzers name frames after their pass: all of them). */
static void pyfiles(az_sym_t *s)
{
    s->pyf_done = 1;
    size_t n = pst_string_count(s->r), k = 0;
    pyfile_t *a = n ? malloc(n * sizeof *a) : NULL;
    if (!a) return;
    for (size_t i = 0; i < n; i++) {
        const char *str = pst_string_at(s->r, i), *nl = str ? strchr(str, '\n') : NULL;
        if (nl && nl[1]) a[k++] = (pyfile_t){ nl + 1, NULL };
    }
    qsort(a, k, sizeof *a, by_base);
    size_t m = 0;
    for (size_t i = 0; i < k; i++)            /* one entry per path */
        if (!m || strcmp(a[m - 1].path, a[i].path)) a[m++] = a[i];
    for (size_t g = 0; g < m;) {              /* each run of one base name */
        size_t e = g + 1;
        while (e < m && !strcmp(suffix(a[g].path, 1), suffix(a[e].path, 1))) e++;
        for (size_t i = g; i < e; i++) {
            int c = 1;
            for (int clash = 1; clash && suffix(a[i].path, c) != a[i].path; ) {
                clash = 0;
                for (size_t j = g; j < e && !clash; j++)
                    clash = j != i && !strcmp(suffix(a[i].path, c), suffix(a[j].path, c));
                if (clash) c++;
            }
            a[i].shown = suffix(a[i].path, c);
        }
        g = e;
    }
    qsort(a, m, sizeof *a, by_path);
    s->pyf = a;
    s->n_pyf = m;
}

/* Append the chain of address a to s->fr; returns the number appended. */
/* A Python frame (format.h, PST_PYFRAME): its string is "qualname\nfile". */
static uint32_t resolve_py(az_sym_t *s, uint64_t a)
{
    az_frame_t *f = push(s);
    if (!f) return 0;
    f->pc = f->addr = a;
    f->python = 1;
    f->line = (int)PST_PYFRAME_LINE(a);
    const char *str = s->r ? pst_string(s->r, PST_PYFRAME_SID(a)) : NULL;
    const char *nl = str ? strchr(str, '\n') : NULL;
    if (nl) {
        char name[1024];
        size_t k = (size_t)(nl - str) < sizeof name - 1 ? (size_t)(nl - str) : sizeof name - 1;
        memcpy(name, str, k);
        name[k] = 0;
        if (!s->pyf_done) pyfiles(s);
        pyfile_t key = { nl + 1, NULL }, *hit = s->n_pyf ? bsearch(&key, s->pyf, s->n_pyf, sizeof key, by_path) : NULL;
        const char *fn = keep(s, name), *file = keep(s, nl + 1);
        f = &s->fr[s->n_fr - 1];          /* keep() does not move fr, but stay plain */
        f->function = fn;
        f->file = file;
        /* the strings stay the reader's while it lives: the tail as a copy */
        f->shown_file = hit && file ? file + (hit->shown - hit->path) : NULL;
    } else {   /* its string lost (a damaged trace, or no reader): still no address */
        f->function = "<python>";
        f->file = "?";
    }
    return 1;
}

static uint32_t resolve(az_sym_t *s, uint64_t a)
{
    if (PST_IS_PYFRAME(a)) return resolve_py(s, a);
    const char *module = NULL;
    uint64_t offset = 0;
    int stale = 0;
    size_t mi = s->n_mods;
    for (size_t i = 0; i < s->n_mods; i++)
        if (a >= s->mods[i].base && a - s->mods[i].base < s->mods[i].size) {
            module = s->mods[i].name;
            offset = a - s->mods[i].base;
            stale = s->mods[i].stale;
            mi = i;
            break;
        }
    size_t first = s->n_fr;
    Dwfl_Module *mod = s->dwfl ? dwfl_addrmodule(s->dwfl, a) : NULL;
    const char *lfile = NULL;
    int lline = 0;
    if (mod) {
        Dwfl_Line *line = dwfl_module_getsrc(mod, a);
        if (line) lfile = dwfl_lineinfo(line, NULL, &lline, NULL, NULL, NULL);
        if (!lfile) lline = 0;
        Dwarf_Addr bias = 0;
        Dwarf_Die *cu = dwfl_module_addrdie(mod, a, &bias);
        /* dwarf_getscopes continues outside the first inlined DIE with its
         * abstract origin's scopes; the concrete nesting (each inlined DIE
         * inside the one it was inlined into) is dwarf_getscopes_die's of
         * the innermost scope */
        Dwarf_Die *scopes = NULL, inner;
        int n = cu ? dwarf_getscopes(cu, a - bias, &scopes) : 0;
        if (n > 0) {
            inner = scopes[0];
            free(scopes);
            scopes = NULL;
            n = dwarf_getscopes_die(&inner, &scopes);
        }
        Dwarf_Files *files = NULL;
        size_t nfiles = 0;
        if (n > 0 && dwarf_getsrcfiles(cu, &files, &nfiles) != 0) files = NULL;
        const char *file = lfile;
        int ln = lline;
        for (int i = 0; i < n; i++) {
            int tag = dwarf_tag(&scopes[i]);
            if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) continue;
            const char *name = die_name(&scopes[i]);
            /* a physical C++ function without a linkage name (static, or in
             * an anonymous namespace): the mangled symbol at its entry,
             * which carries its scope and parameters */
            Dwarf_Addr entry;
            if (tag == DW_TAG_subprogram && !die_linkage_name(&scopes[i]) && is_cxx(cu) &&
                dwarf_entrypc(&scopes[i], &entry) == 0) {
                uint64_t off = 1;
                const char *sn = sym_at(s, mod, a, &off);
                if (sn && sn[0] == '_' && sn[1] == 'Z' && a - off == entry + bias) name = sn;
            }
            az_frame_t *f = push(s);
            if (!f) break;
            f->function = keep_name(s, name);
            f->file = keep(s, file);
            f->line = file ? ln : 0;
            if (tag == DW_TAG_subprogram) break;
            f->inlined = 1;
            /* the next frame out is at this inlined call's site */
            Dwarf_Attribute at;
            Dwarf_Word cf = 0, cl = 0;
            file = NULL; ln = 0;
            if (files && dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &at), &cf) == 0 && cf < nfiles)
                file = dwarf_filesrc(files, cf, NULL, NULL);
            if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &at), &cl) == 0) ln = (int)cl;
        }
        free(scopes);
        /* an inlined chain must end in a physical function */
        if (s->n_fr > first && s->fr[s->n_fr - 1].inlined) {
            az_frame_t *f = push(s);
            if (f) { f->file = keep(s, file); f->line = file ? ln : 0; }
        }
    }
    if (s->n_fr == first) {
        az_frame_t *f = push(s);
        if (!f) return 0;
        f->file = keep(s, lfile);
        f->line = lline;
    }
    /* the physical frame without a DWARF name: the symbol table's */
    az_frame_t *phys = &s->fr[s->n_fr - 1];
    if (!phys->function && mod) phys->function = keep_name(s, sym_at(s, mod, a, NULL));
    if (!phys->function && mi < s->n_mods && !stale) nosym_note(s, mi);
    for (size_t i = first; i < s->n_fr; i++) {
        s->fr[i].module = module;
        s->fr[i].offset = offset;
        s->fr[i].addr = a;
        s->fr[i].stale = stale && !mod;
    }
    return (uint32_t)(s->n_fr - first);
}

/* The chain of looked-up address a: from the memo, else resolved. */
static chain_ref_t chain_of(az_sym_t *s, uint64_t a)
{
    const chain_ref_t *hit = psc_map_get_sz(&s->cache, a, sizeof(chain_ref_t));
    if (hit) return *hit;
    chain_ref_t r = { (uint32_t)s->n_fr, 0 };
    r.count = resolve(s, a);
    chain_ref_t *slot = psc_map_put_sz(&s->cache, a, NULL, sizeof(chain_ref_t));
    if (slot) *slot = r;
    return r;
}

/* Is recorded address pc the first instruction of a signal trampoline? */
static int is_trampoline(az_sym_t *s, uint64_t pc)
{
    const int *hit = psc_map_get_sz(&s->tramp, pc, sizeof(int));
    if (hit) return *hit == 1;
    int t = 2;
    Dwfl_Module *mod = s->dwfl ? dwfl_addrmodule(s->dwfl, pc) : NULL;
    if (mod) {
        uint64_t off = 1;
        const char *n = sym_at(s, mod, pc, &off);
        if (n && off == 0 && !strcmp(n, "__restore_rt")) t = 1;
    }
    int *slot = psc_map_put_sz(&s->tramp, pc, NULL, sizeof(int));
    if (slot) *slot = t;
    return t == 1;
}

static size_t copy_chain(az_sym_t *s, uint64_t pc, uint64_t a, uint32_t level, az_frame_t *out,
                         size_t at, size_t max)
{
    chain_ref_t r = chain_of(s, a);
    for (uint32_t k = 0; k < r.count; k++, at++) {
        if (at >= max) continue;
        out[at] = s->fr[r.first + k];
        out[at].pc = pc;
        out[at].level = level;
    }
    return at;
}

size_t az_sym_stack(az_sym_t *s, const uint64_t *pcs, uint32_t depth, az_frame_t *out, size_t max)
{
    size_t n = 0;
    int interrupted = 0;   /* the frame above a trampoline: at its pc */
    for (uint32_t i = 0; i < depth; i++) {
        uint64_t pc = pcs[i], a = pc;
        if (PST_IS_PYFRAME(pc)) {   /* no return address: looked up as it is */
            interrupted = 0;
            n = copy_chain(s, pc, pc, i, out, n, max);
            continue;
        }
        int tramp = pc && is_trampoline(s, pc);
        if (!tramp && !interrupted && pc) a = pc - 1;
        interrupted = tramp;
        n = copy_chain(s, pc, a, i, out, n, max);
    }
    return n;
}

const char *az_sym_format(const az_frame_t *f, uint64_t pc, char *buf, size_t len)
{
    if (f->function && f->file) {
        const char *base = strrchr(f->file, '/');
        if (f->shown_file) base = f->shown_file - 1;
        snprintf(buf, len, "%s (%s:%d)", f->function, base ? base + 1 : f->file, f->line);
    } else if (f->function) {
        snprintf(buf, len, "%s", f->function);
    } else if (f->module) {
        snprintf(buf, len, "%s+0x%llx%s", f->module, (unsigned long long)f->offset, f->stale ? " [binary changed]" : "");
    } else {
        snprintf(buf, len, "0x%llx", (unsigned long long)pc);
    }
    return buf;
}

int az_sym_is_tracer(const az_frame_t *f)
{
    return f->module && strstr(f->module, "poolscope-preload") != NULL;
}
