/* launch.c — the library half of `poolscope record`: check that a program
 * can be traced, run it under the interposer, and say what was written.
 *
 * In the order record uses it:
 *   1. find the preload library (an override, else next to the executable:
 *      build tree <bin>/../lib/, installed <prefix>/lib/poolscope/);
 *   2. resolve the command through PATH as execvp would, and refuse what
 *      LD_PRELOAD cannot reach: a static ELF (no PT_INTERP) or a setuid /
 *      setgid file (the loader drops LD_PRELOAD in secure-execution mode);
 *      a "#!" script is judged by its interpreter;
 *   3. check the output directory before anything runs (exists, writable,
 *      takes a new file) and refuse an existing -o file;
 *   4. fork and exec with the environment of libtrace/preload/README.md,
 *      built in the parent so the child only fills in its pid and calls
 *      execve (nothing that takes a lock between fork and exec). A
 *      close-on-exec pipe carries a failure before or at the exec back;
 *   5. forward SIGINT/SIGTERM/SIGHUP sent to us while the program runs
 *      (blocked and read from a signalfd, with SIGCHLD); wait without
 *      reaping first, to read the zombie's /proc/PID/comm (the kernel's
 *      name of its last image), then reap;
 *   6. read the manifest (one "pid<TAB>path" line per traced image) and
 *      each trace's END chunk (pst_read_end: header and last bytes only; a
 *      trace without a valid END is read with the streaming reader, as far
 *      as it goes), and look for images that exec'd an untraced program.
 *
 * Untraced children. The interposer hands LD_PRELOAD on to every child but
 * cannot stop a program from removing it (`env -u LD_PRELOAD prog`, an
 * execve with a cleaned environment). Such a child writes no trace and no
 * manifest line. What this file relies on to notice it, without reading
 * the traces' events (which is what record must no longer do):
 *   - the interposer records EXEC(path) just before an exec, flushes every
 *     stream and writes END (hooks_proc.c, core.c ps_exec_begin), so after a
 *     successful exec the EXEC record is the last record of its thread's
 *     stream, in that stream's last EVENTS chunk;
 *   - a traced successor image has the same pid and a higher EXEC_GEN in
 *     its header, and a manifest line. So only the LAST traced image of
 *     each pid can have exec'd without the tracer;
 *   - for a pid other than record's own child there is no cheap evidence
 *     that it exec'd, so its last image is always looked at: the chunk
 *     headers are walked (16 bytes each) and each stream's last EVENTS chunk
 *     is decoded (bounded by one flush per thread, not by the trace's
 *     length), plus the META chunks back to the EXEC path's definition;
 *   - for record's own child, whose traces are usually the big ones, the
 *     look happens only when the kernel's name of its final image (the
 *     zombie's comm) is neither the basename of the last traced image's
 *     executable nor of its argv[0]: an exec into something else happened,
 *     or the program renamed itself (then the look finds no EXEC and costs
 *     the bounded read above);
 *   - an EXEC whose path does not resolve to an executable file now (via
 *     PATH when it has no slash) is taken as a failed exec and not noted;
 *     one LD_PRELOAD cannot reach (static, setuid) is noted as such;
 *     with --follow-exec, a path the pattern does not match was left
 *     untraced on purpose and is not noted either.
 * Not seen: a posix_spawn'd child with a cleaned environment (its FORK
 * record can sit anywhere in the parent's trace, so finding it means
 * reading the whole trace), and record's own child exec'ing, untraced, a
 * program of the same name (its comm does not change). The bytes read for
 * the look are counted in the entry's scanned_bytes.
 *
 * Silent gaps. Two ways a program runs without the trace showing what it
 * did, each said in a "record: ..." note:
 *   - a fork child that cannot open its trace file (RLIMIT_NOFILE reached,
 *     the directory full) runs untraced. It cannot write a manifest line
 *     then (no descriptor), so the interposer makes a symbolic link
 *     "<pid>.<k>.untraced" -> "<errno>" in the run's counters directory
 *     (hooks_proc.c, ps_note_untraced: a link takes no descriptor), read
 *     here. Not covered: an exec'd or first image that cannot open its
 *     trace (the first: "no trace was written"), and runs without a
 *     counters directory (no /dev/shm).
 *   - a program whose executable defines malloc (or calloc, realloc,
 *     free) in its dynamic symbol table: the loader finds the
 *     executable's definition before the preloaded one, so the tracer sees
 *     no heap call at all (a statically linked allocator, jemalloc or
 *     tcmalloc linked in). The rule: the executable named in the trace's
 *     header exports such a definition AND its complete trace holds no
 *     malloc-family event. The symbol table is read for every trace (a
 *     few KiB); the events only for such a program's traces, up to the
 *     first malloc-family event, so an ordinary trace is still read from
 *     its END alone. Not seen: a program that never calls malloc without
 *     defining it (its own mmap-based allocator, e.g. Go's): telling it
 *     from one that made no allocation would mean reading every trace.
 */
#include "launch.h"
#include "ctl.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "poolscope/error.h"
#include "poolscope/format.h"
#include "poolscope/reader.h"

#include "escape.h"

extern char **environ;

static void set_msg(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_msg(char *msg, size_t cap, const char *fmt, ...)
{
    if (!msg || !cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int is_readable_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

static int is_exec_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

/* ---- 1. the preload library ---------------------------------------------------- */

static int copy_out(char *out, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n >= cap) return PSC_ERANGE;
    memcpy(out, s, n + 1);
    return 0;
}

int pl_find_preload(const char *bindir, char *out, size_t cap, char *msg, size_t mcap)
{
    char real[PATH_MAX];
    const char *env = getenv("POOLSCOPE_PRELOAD_LIB");
    if (env && *env) {
        if (!realpath(env, real) || !is_readable_file(real)) {
            set_msg(msg, mcap, "POOLSCOPE_PRELOAD_LIB=%s: no such readable file", env);
            return PSC_ENOENT;
        }
        if (copy_out(out, cap, real)) { set_msg(msg, mcap, "%s: path too long", real); return PSC_ERANGE; }
        return 0;
    }
    char dir[PATH_MAX];
    if (bindir) {
        if (copy_out(dir, sizeof dir, bindir)) { set_msg(msg, mcap, "%s: path too long", bindir); return PSC_ERANGE; }
    } else {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
        if (n <= 0) { set_msg(msg, mcap, "cannot read /proc/self/exe: %s", strerror(errno)); return PSC_EIO; }
        dir[n] = 0;
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
    }
    static const char *const rel[] = { "/../lib/" PL_PRELOAD_NAME, "/../lib/poolscope/" PL_PRELOAD_NAME };
    char tried[2][PATH_MAX];
    for (size_t i = 0; i < 2; i++) {
        /* a path too long to hold is simply not a candidate */
        if ((size_t)snprintf(tried[i], sizeof tried[i], "%s%s", dir, rel[i]) >= sizeof tried[i]) {
            tried[i][0] = 0;
            continue;
        }
        if (is_readable_file(tried[i]) && realpath(tried[i], real)) {
            if (copy_out(out, cap, real)) { set_msg(msg, mcap, "%s: path too long", real); return PSC_ERANGE; }
            return 0;
        }
    }
    set_msg(msg, mcap, "preload library not found (looked for %s and %s); build it with `make` or set "
            "POOLSCOPE_PRELOAD_LIB", tried[0], tried[1]);
    return PSC_ENOENT;
}

/* ---- 2. the command -------------------------------------------------------------- */

int pl_resolve_exit_code(int err)
{
    return err == PSC_ENOENT || err == PSC_ERANGE ? PL_EXIT_NOT_FOUND : PL_EXIT_NOT_EXEC;
}

int pl_resolve_cmd(const char *name, const char *path_env, char *out, size_t cap,
                   char *msg, size_t mcap)
{
    if (!name || !*name) { set_msg(msg, mcap, "empty command name"); return PSC_ENOENT; }
    if (strchr(name, '/')) {
        struct stat st;
        if (strlen(name) >= cap) { set_msg(msg, mcap, "%.64s...: path too long", name); return PSC_ERANGE; }
        if (stat(name, &st) != 0) { set_msg(msg, mcap, "%s: %s", name, strerror(errno)); return PSC_ENOENT; }
        if (!S_ISREG(st.st_mode) || access(name, X_OK) != 0) {
            set_msg(msg, mcap, "%s: not an executable file", name);
            return PSC_EINVAL;
        }
        memcpy(out, name, strlen(name) + 1);
        return 0;
    }
    const char *path = path_env ? path_env : getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    for (;;) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        /* an empty element is the current directory, as for execvp */
        int n = len ? snprintf(out, cap, "%.*s/%s", (int)len, path, name)
                    : snprintf(out, cap, "%s", name);
        if (n > 0 && (size_t)n < cap && is_exec_file(out)) return 0;
        if (!colon) break;
        path = colon + 1;
    }
    if (cap) out[0] = 0;
    set_msg(msg, mcap, "%s: command not found", name);
    return PSC_ENOENT;
}

/* Does this ELF file name a program interpreter? 1 yes, 0 no (static),
 * -1 not an ELF file, -2 malformed. */
static int elf_has_interp(int fd)
{
    unsigned char id[EI_NIDENT];
    if (pread(fd, id, sizeof id, 0) != (ssize_t)sizeof id) return -1;
    if (memcmp(id, ELFMAG, SELFMAG) != 0) return -1;
    uint64_t phoff, phnum, phentsize;
    if (id[EI_CLASS] == ELFCLASS64) {
        Elf64_Ehdr eh;
        if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) return -2;
        phoff = eh.e_phoff; phnum = eh.e_phnum; phentsize = eh.e_phentsize;
        if (phentsize < sizeof(Elf64_Phdr)) return -2;
    } else if (id[EI_CLASS] == ELFCLASS32) {
        Elf32_Ehdr eh;
        if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) return -2;
        phoff = eh.e_phoff; phnum = eh.e_phnum; phentsize = eh.e_phentsize;
        if (phentsize < sizeof(Elf32_Phdr)) return -2;
    } else {
        return -2;
    }
    for (uint64_t i = 0; i < phnum; i++) {
        uint32_t type;   /* p_type is the first word in both classes */
        if (pread(fd, &type, sizeof type, (off_t)(phoff + i * phentsize)) != (ssize_t)sizeof type)
            return -2;
        if (type == PT_INTERP) return 1;
    }
    return 0;
}

/* Does this ELF file define malloc, calloc, realloc or free in its dynamic
 * symbol table (a global or weak function with a section)? 1 yes, 0 no, -1
 * cannot tell (not an ELF file, no section headers, too big, damaged). */
static int elf_defines_malloc(const char *path)
{
    static const char *const names[] = { "malloc", "calloc", "realloc", "free" };
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    unsigned char id[EI_NIDENT];
    int rc = -1;
    char *syms = NULL, *strs = NULL;
    uint64_t shoff, shnum, shentsize;
    int is64;
    if (pread(fd, id, sizeof id, 0) != (ssize_t)sizeof id || memcmp(id, ELFMAG, SELFMAG) != 0) goto out;
    is64 = id[EI_CLASS] == ELFCLASS64;
    if (is64) {
        Elf64_Ehdr eh;
        if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) goto out;
        shoff = eh.e_shoff; shnum = eh.e_shnum; shentsize = eh.e_shentsize;
        if (shentsize < sizeof(Elf64_Shdr)) goto out;
    } else if (id[EI_CLASS] == ELFCLASS32) {
        Elf32_Ehdr eh;
        if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) goto out;
        shoff = eh.e_shoff; shnum = eh.e_shnum; shentsize = eh.e_shentsize;
        if (shentsize < sizeof(Elf32_Shdr)) goto out;
    } else {
        goto out;
    }
    /* section i: type, offset, size, link */
#define SHDR(i, ty, of, sz, ln) do {                                                          \
        if (is64) {                                                                           \
            Elf64_Shdr h;                                                                     \
            if (pread(fd, &h, sizeof h, (off_t)(shoff + (i) * shentsize)) != (ssize_t)sizeof h) goto out; \
            ty = h.sh_type; of = h.sh_offset; sz = h.sh_size; ln = h.sh_link;                 \
        } else {                                                                              \
            Elf32_Shdr h;                                                                     \
            if (pread(fd, &h, sizeof h, (off_t)(shoff + (i) * shentsize)) != (ssize_t)sizeof h) goto out; \
            ty = h.sh_type; of = h.sh_offset; sz = h.sh_size; ln = h.sh_link;                 \
        }                                                                                     \
    } while (0)
    const uint64_t max = 64u << 20;
    for (uint64_t i = 0; i < shnum && i < 65536; i++) {
        uint64_t ty, of, sz, ln, sty, sof, ssz, sln;
        SHDR(i, ty, of, sz, ln);
        if (ty != SHT_DYNSYM) continue;
        if (ln >= shnum || sz > max) goto out;
        SHDR(ln, sty, sof, ssz, sln);
        (void)sln;
        if (sty != SHT_STRTAB || ssz > max || ssz == 0) goto out;
        if (!(syms = malloc(sz ? sz : 1)) || !(strs = malloc(ssz))) goto out;
        if (pread(fd, syms, sz, (off_t)of) != (ssize_t)sz || pread(fd, strs, ssz, (off_t)sof) != (ssize_t)ssz)
            goto out;
        strs[ssz - 1] = 0;
        size_t ent = is64 ? sizeof(Elf64_Sym) : sizeof(Elf32_Sym);
        rc = 0;
        for (uint64_t k = 0; k + 1 <= sz / ent && !rc; k++) {
            uint64_t name, shndx;
            unsigned info;
            if (is64) {
                Elf64_Sym y;
                memcpy(&y, syms + k * ent, sizeof y);
                name = y.st_name; shndx = y.st_shndx; info = y.st_info;
            } else {
                Elf32_Sym y;
                memcpy(&y, syms + k * ent, sizeof y);
                name = y.st_name; shndx = y.st_shndx; info = y.st_info;
            }
            unsigned type = info & 0xf, bind = info >> 4;
            if (shndx == SHN_UNDEF || name >= ssz || (type != STT_FUNC && type != STT_GNU_IFUNC) ||
                (bind != STB_GLOBAL && bind != STB_WEAK))
                continue;
            for (size_t j = 0; j < sizeof names / sizeof names[0]; j++)
                if (!strcmp(strs + name, names[j])) rc = 1;
        }
        break;
    }
#undef SHDR
out:
    free(syms);
    free(strs);
    close(fd);
    return rc;
}

static int check_target(const char *path, int depth, char *msg, size_t mcap)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        set_msg(msg, mcap, "%s: %s", path, strerror(e));
        return e == ENOENT || e == ENOTDIR ? PSC_ENOENT : PSC_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
        set_msg(msg, mcap, "%s: not a regular file", path);
        return PSC_EINVAL;
    }
    if (st.st_mode & (S_ISUID | S_ISGID)) {
        set_msg(msg, mcap, "%s is set%s: the loader ignores LD_PRELOAD for it, refusing to record",
                path, (st.st_mode & S_ISUID) ? "uid" : "gid");
        return PSC_EUNSUP;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { set_msg(msg, mcap, "%s: %s", path, strerror(errno)); return PSC_EIO; }
    char head[256] = { 0 };
    ssize_t n = pread(fd, head, sizeof head - 1, 0);
    int r = elf_has_interp(fd);
    close(fd);
    if (n >= 2 && head[0] == '#' && head[1] == '!') {
        if (depth >= 4) return 0;   /* the kernel gives up here too; let exec say so */
        char *p = head + 2;
        while (*p == ' ' || *p == '\t') p++;
        char *e = p;
        while (*e && *e != ' ' && *e != '\t' && *e != '\n' && *e != '\r') e++;
        *e = 0;
        return *p ? check_target(p, depth + 1, msg, mcap) : 0;
    }
    if (r == 0) {
        set_msg(msg, mcap, "%s is statically linked: LD_PRELOAD cannot trace it, refusing to record", path);
        return PSC_EUNSUP;
    }
    if (r == -2) {
        set_msg(msg, mcap, "%s: malformed ELF file", path);
        return PSC_ECORRUPT;
    }
    return 0;   /* dynamic ELF, or something execvp hands to /bin/sh */
}

int pl_check_target(const char *path, char *msg, size_t mcap)
{
    if (!path || !*path) { set_msg(msg, mcap, "empty target path"); return PSC_ENOENT; }
    return check_target(path, 0, msg, mcap);
}

/* ---- 3. the output ---------------------------------------------------------------- */

/* Can a new file be made in dir? 0, or PSC_ENOENT / PSC_EIO with msg
 * "<what>cannot write in <where>: <why>". */
static int dir_takes_files(const char *dir, const char *what, const char *where, char *msg, size_t mcap)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        set_msg(msg, mcap, "%scannot write in %s: %s", what, where, strerror(e));
        return e == ENOENT || e == ENOTDIR ? PSC_ENOENT : PSC_EIO;
    }
    if (!S_ISDIR(st.st_mode)) {
        set_msg(msg, mcap, "%scannot write in %s: not a directory", what, where);
        return PSC_ENOENT;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        set_msg(msg, mcap, "%scannot write in %s: %s", what, where, strerror(errno));
        return PSC_EIO;
    }
    /* access() says yes to root on a read-only mount and in /proc: try it */
    char probe[PATH_MAX];
    if ((size_t)snprintf(probe, sizeof probe, "%s/.poolscope-probe.XXXXXX", dir) >= sizeof probe) {
        set_msg(msg, mcap, "%scannot write in %s: path too long", what, where);
        return PSC_ERANGE;
    }
    int fd = mkostemp(probe, O_CLOEXEC);
    if (fd < 0) {
        set_msg(msg, mcap, "%scannot write in %s: %s", what, where, strerror(errno));
        return PSC_EIO;
    }
    close(fd);
    unlink(probe);
    return 0;
}

int pl_prepare_output(const char *out, char *abs, size_t cap, char *msg, size_t mcap)
{
    char cwd[PATH_MAX];
    if ((!out || out[0] != '/') && !getcwd(cwd, sizeof cwd)) {
        set_msg(msg, mcap, "cannot get the current directory: %s", strerror(errno));
        return PSC_EIO;
    }
    if (!out) {
        if (copy_out(abs, cap, cwd)) { set_msg(msg, mcap, "%s: path too long", cwd); return PSC_ERANGE; }
        char where[PATH_MAX + 32];
        snprintf(where, sizeof where, "the current directory %s", cwd);
        return dir_takes_files(cwd, "", where, msg, mcap);
    }
    struct stat st;
    if (lstat(out, &st) == 0) {
        set_msg(msg, mcap, "%s exists; not overwriting it", out);
        return PSC_EINVAL;
    }
    int n = out[0] == '/' ? snprintf(abs, cap, "%s", out) : snprintf(abs, cap, "%s/%s", cwd, out);
    if (n < 0 || (size_t)n >= cap) { set_msg(msg, mcap, "%s: path too long", out); return PSC_ERANGE; }
    char dir[PATH_MAX];
    if (copy_out(dir, sizeof dir, abs)) { set_msg(msg, mcap, "%s: path too long", out); return PSC_ERANGE; }
    char *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;   /* "/x.pst": the root */
    else *slash = 0;
    char what[PATH_MAX + 8];
    snprintf(what, sizeof what, "%s: ", out);
    return dir_takes_files(dir, what, dir, msg, mcap);
}

int pl_manifest_create(char *path, size_t cap, char *msg, size_t mcap)
{
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(path, cap, "%s/poolscope-manifest.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (n < 0 || (size_t)n >= cap) { set_msg(msg, mcap, "TMPDIR is too long"); return PSC_ERANGE; }
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        set_msg(msg, mcap, "cannot create a manifest file %s: %s", path, strerror(errno));
        return PSC_EIO;
    }
    close(fd);
    return 0;
}

void pl_ctl_dir_create(char *dir, size_t cap)
{
    if (cap <= sizeof PST_CTL_DIR_TMPL) { if (cap) dir[0] = 0; return; }
    memcpy(dir, PST_CTL_DIR_TMPL, sizeof PST_CTL_DIR_TMPL);
    if (!mkdtemp(dir)) dir[0] = 0;
}

void pl_ctl_dir_remove(const char *dir)
{
    if (!dir || !*dir) return;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char p[PATH_MAX];
        while ((de = readdir(d))) {
            size_t n = strlen(de->d_name);
            if ((n < 5 || strcmp(de->d_name + n - 4, ".ctl")) &&
                (n < 10 || strcmp(de->d_name + n - 9, ".untraced")) && strcmp(de->d_name, PST_CTL_STOP))
                continue;   /* only what the images made */
            if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < (int)sizeof p) unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static uint64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- 4, 5. running ------------------------------------------------------------------ */

/* Forwarded while the program runs. They (and SIGCHLD) are blocked and read
 * from a signalfd instead of caught: no handler, no static for it to find
 * the child's pid in, and nothing a sanitizer's deferred signal delivery
 * could hold back until the program has exited. */
static const int fwd_signals[] = { SIGINT, SIGTERM, SIGHUP };
#define N_FWD (sizeof fwd_signals / sizeof fwd_signals[0])

/* What the child needs, all made before fork. */
typedef struct plan {
    char **envp;          /* the child's environment */
    size_t n_env, cap_env;
    char **owned;         /* strings we allocated */
    size_t n_owned, cap_owned;
    char **sh_argv;       /* for a file exec refuses with ENOEXEC */
    char *out_var;        /* "POOLSCOPE_OUT=<cwd>/poolscope." + digits + ".pst" room, or NULL */
    size_t out_digits;    /* offset where the pid goes */
} plan_t;

/* What a failing child reports through the pipe. */
typedef struct child_report { int stage, err; } child_report_t;
enum { STAGE_EXISTS = 1, STAGE_EXEC = 2 };

static int plan_push(plan_t *p, char *s)
{
    if (p->n_env + 2 > p->cap_env) {
        size_t nc = p->cap_env ? 2 * p->cap_env : 64;
        char **v = realloc(p->envp, nc * sizeof *v);
        if (!v) return PSC_ENOMEM;
        p->envp = v;
        p->cap_env = nc;
    }
    p->envp[p->n_env++] = s;
    p->envp[p->n_env] = NULL;
    return 0;
}

/* A new "NAME=value" string, owned by the plan and added to envp. */
static int plan_set(plan_t *p, const char *name, const char *value)
{
    if (p->n_owned + 1 > p->cap_owned) {
        size_t nc = p->cap_owned ? 2 * p->cap_owned : 16;
        char **v = realloc(p->owned, nc * sizeof *v);
        if (!v) return PSC_ENOMEM;
        p->owned = v;
        p->cap_owned = nc;
    }
    size_t n = strlen(name) + strlen(value) + 2;
    char *s = malloc(n);
    if (!s) return PSC_ENOMEM;
    snprintf(s, n, "%s=%s", name, value);
    p->owned[p->n_owned++] = s;
    return plan_push(p, s);
}

static void plan_free(plan_t *p)
{
    for (size_t i = 0; i < p->n_owned; i++) free(p->owned[i]);
    free(p->owned);
    free(p->envp);
    free(p->sh_argv);
    free(p->out_var);
    memset(p, 0, sizeof *p);
}

static int env_is(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* record's flags are authoritative: stale settings from outside go. The
 * library's own POOLSCOPE_GEN / POOLSCOPE_EXEC_PATH are left as they are. */
static const char *const dropped_vars[] = {
    "LD_PRELOAD", "POOLSCOPE_OUT", "POOLSCOPE_MANIFEST", "POOLSCOPE_STACKS", "POOLSCOPE_DEPTH",
    "POOLSCOPE_FOLLOW_EXEC", "POOLSCOPE_SIGNAL", "POOLSCOPE_PAUSED", "POOLSCOPE_SCOPE_FUNCS",
    PST_CTL_DIR_ENV,
};

static int plan_make(const pl_spec_t *s, plan_t *p, char *msg, size_t mcap)
{
    memset(p, 0, sizeof *p);
    size_t argc = 0;
    while (s->argv[argc]) argc++;
    if (!(p->sh_argv = calloc(argc + 2, sizeof *p->sh_argv))) goto nomem;
    p->sh_argv[0] = (char *)"/bin/sh";
    p->sh_argv[1] = (char *)s->target;
    for (size_t i = 1; i < argc; i++) p->sh_argv[i + 1] = s->argv[i];

    if (!s->preload) {   /* run plainly: the environment as it is */
        for (char **e = environ; e && *e; e++)
            if (plan_push(p, *e)) goto nomem;
        if (!p->envp && plan_push(p, NULL)) goto nomem;
        return 0;
    }
    const char *old = NULL;
    for (char **e = environ; e && *e; e++) {
        int drop = 0;
        for (size_t i = 0; i < sizeof dropped_vars / sizeof dropped_vars[0]; i++)
            if (env_is(*e, dropped_vars[i])) drop = 1;
        if (env_is(*e, "LD_PRELOAD")) old = *e + strlen("LD_PRELOAD=");
        if (!drop && plan_push(p, *e)) goto nomem;
    }
    /* LD_PRELOAD: ours first, what was there after it */
    if (old && *old && !strstr(old, s->preload)) {
        size_t n = strlen(s->preload) + strlen(old) + 2;
        char *v = malloc(n);
        if (!v) goto nomem;
        snprintf(v, n, "%s:%s", s->preload, old);
        int rc = plan_set(p, "LD_PRELOAD", v);
        free(v);
        if (rc) goto nomem;
    } else if (plan_set(p, "LD_PRELOAD", old && *old ? old : s->preload)) {
        goto nomem;
    }
    if (s->out) {
        if (plan_set(p, "POOLSCOPE_OUT", s->out)) goto nomem;
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) {
            set_msg(msg, mcap, "cannot get the current directory: %s", strerror(errno));
            plan_free(p);
            return PSC_EIO;
        }
        size_t n = strlen("POOLSCOPE_OUT=") + strlen(cwd) + strlen("/poolscope.") + 24 + 5;
        if (!(p->out_var = malloc(n))) goto nomem;
        int k = snprintf(p->out_var, n, "POOLSCOPE_OUT=%s/poolscope.", cwd);
        p->out_digits = (size_t)k;
        if (plan_push(p, p->out_var)) goto nomem;
    }
    char num[32];
    if (s->manifest && plan_set(p, "POOLSCOPE_MANIFEST", s->manifest)) goto nomem;
    if (s->ctl_dir && *s->ctl_dir && plan_set(p, PST_CTL_DIR_ENV, s->ctl_dir)) goto nomem;
    if (s->stacks && plan_set(p, "POOLSCOPE_STACKS", s->stacks)) goto nomem;
    if (s->depth) {
        snprintf(num, sizeof num, "%ld", s->depth);
        if (plan_set(p, "POOLSCOPE_DEPTH", num)) goto nomem;
    }
    if (s->follow_exec && plan_set(p, "POOLSCOPE_FOLLOW_EXEC", s->follow_exec)) goto nomem;
    if (s->signo) {
        snprintf(num, sizeof num, "%d", s->signo);
        if (plan_set(p, "POOLSCOPE_SIGNAL", num)) goto nomem;
    }
    if (s->paused && plan_set(p, "POOLSCOPE_PAUSED", "1")) goto nomem;
    if (s->scope_funcs && plan_set(p, "POOLSCOPE_SCOPE_FUNCS", s->scope_funcs)) goto nomem;
    return 0;
nomem:
    set_msg(msg, mcap, "out of memory setting up the environment");
    plan_free(p);
    return PSC_ENOMEM;
}

/* After fork, before exec: async-signal-safe calls only. Never returns. */
static void child_exec(const pl_spec_t *s, plan_t *p, int errfd, const sigset_t *oldmask,
                       const struct sigaction *oldchld)
{
    child_report_t rep = { 0, 0 };
    for (size_t i = 0; i < N_FWD; i++) signal(fwd_signals[i], SIG_DFL);
    sigaction(SIGCHLD, oldchld, NULL);
    sigprocmask(SIG_SETMASK, oldmask, NULL);
    if (p->out_var) {
        /* <cwd>/poolscope.<pid>.pst, never an existing file */
        char digits[24];
        int n = 0;
        unsigned long v = (unsigned long)getpid();
        do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
        char *q = p->out_var + p->out_digits;
        while (n) *q++ = digits[--n];
        memcpy(q, ".pst", 5);
        struct stat st;
        if (lstat(p->out_var + strlen("POOLSCOPE_OUT="), &st) == 0) {
            rep.stage = STAGE_EXISTS;
            rep.err = EEXIST;
            if (write(errfd, &rep, sizeof rep) < 0) { /* nothing more to do */ }
            _exit(PL_EXIT_USAGE);
        }
    }
    execve(s->target, s->argv, p->envp);
    if (errno == ENOEXEC)   /* as execvp: a file without a known header is a shell script */
        execve("/bin/sh", p->sh_argv, p->envp);
    rep.stage = STAGE_EXEC;
    rep.err = errno;
    if (write(errfd, &rep, sizeof rep) < 0) { /* nothing more to do */ }
    _exit(rep.err == ENOENT ? PL_EXIT_NOT_FOUND : PL_EXIT_NOT_EXEC);
}

int pl_exit_code(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

static void read_comm(pid_t pid, char comm[16])
{
    char p[64];
    comm[0] = 0;
    snprintf(p, sizeof p, "/proc/%ld/comm", (long)pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, comm, 15);
    close(fd);
    if (n <= 0) { comm[0] = 0; return; }
    comm[n] = 0;
    char *nl = strchr(comm, '\n');
    if (nl) *nl = 0;
}

int pl_run(const pl_spec_t *s, pl_result_t *res, char *msg, size_t mcap)
{
    memset(res, 0, sizeof *res);
    res->exit_code = PL_EXIT_USAGE;
    if (!s || !s->target || !s->argv || !s->argv[0]) {
        set_msg(msg, mcap, "nothing to run");
        return PSC_EINVAL;
    }
    plan_t plan;
    int rc = plan_make(s, &plan, msg, mcap);
    if (rc) return rc;
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        set_msg(msg, mcap, "pipe: %s", strerror(errno));
        plan_free(&plan);
        return PSC_EIO;
    }

    /* Block the forwarded signals and SIGCHLD before fork: whatever comes
     * before the child's pid is known waits in the signalfd. SIGCHLD must
     * not be ignored meanwhile (the kernel would reap the child itself). */
    sigset_t block, oldmask;
    sigemptyset(&block);
    for (size_t i = 0; i < N_FWD; i++) sigaddset(&block, fwd_signals[i]);
    sigaddset(&block, SIGCHLD);
    if (s->stop_signo > 0) sigaddset(&block, s->stop_signo);
    struct sigaction dfl, oldchld;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, &oldchld);
    pthread_sigmask(SIG_BLOCK, &block, &oldmask);
    int sfd = signalfd(-1, &block, SFD_CLOEXEC);

    fflush(NULL);
    pid_t pid = sfd >= 0 ? fork() : -1;
    if (pid == 0) {
        close(pfd[0]);
        child_exec(s, &plan, pfd[1], &oldmask, &oldchld);
    }
    int fork_errno = errno;
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        if (sfd >= 0) close(sfd);
        pthread_sigmask(SIG_SETMASK, &oldmask, NULL);
        sigaction(SIGCHLD, &oldchld, NULL);
        plan_free(&plan);
        set_msg(msg, mcap, "%s: %s", sfd < 0 ? "signalfd" : "fork", strerror(fork_errno));
        return PSC_EIO;
    }
    res->pid = pid;

    /* EOF on the pipe: the exec happened. A report: the child failed first. */
    child_report_t rep = { 0, 0 };
    size_t got = 0;
    while (got < sizeof rep) {
        ssize_t r = read(pfd[0], (char *)&rep + got, sizeof rep - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(pfd[0]);
    if (got == 0 && s->started) s->started(s->started_ctx, pid);

    /* Until the child has exited: forward what was sent to us (si_code <= 0:
     * kill, sigqueue, tkill), not what the kernel sent (a terminal's ^C
     * reaches the whole foreground group, the child has it already). The
     * child is waited for without reaping, so the zombie's comm can be
     * read, then reaped. */
    uint64_t t_stop = s->stop_after_ns && got == 0 ? mono_now() + s->stop_after_ns : 0;
    int stopped = 0;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        int w = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (w == 0 && si.si_pid == pid) break;
        if (w < 0 && errno != EINTR) break;
        if (t_stop && !stopped) {   /* --duration: wait for a signal until then */
            uint64_t now = mono_now();
            if (now >= t_stop) {
                stopped = 1;
                int k = pst_ctl_stop(s->ctl_dir);
                if (s->stopping) s->stopping(s->started_ctx, 1, k);
                continue;
            }
            struct pollfd pf = { .fd = sfd, .events = POLLIN };
            if (poll(&pf, 1, (int)((t_stop - now + 999999) / 1000000)) <= 0) continue;   /* time, EINTR */
        }
        struct signalfd_siginfo fi;
        ssize_t n = read(sfd, &fi, sizeof fi);
        if (n == (ssize_t)sizeof fi && s->stop_signo > 0 && (int)fi.ssi_signo == s->stop_signo) {
            if (!stopped && got == 0) {
                stopped = 1;
                int k = pst_ctl_stop(s->ctl_dir);
                if (s->stopping) s->stopping(s->started_ctx, 2, k);
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n != (ssize_t)sizeof fi) {   /* cannot happen; wait without forwarding */
            while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
            break;
        }
        if (fi.ssi_signo != SIGCHLD && fi.ssi_code <= 0) kill(pid, (int)fi.ssi_signo);
    }
    read_comm(pid, res->comm);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    close(sfd);
    /* the stop signal stays blocked: one sent late (the program has just
     * ended) must not kill the caller before it says what was written */
    if (s->stop_signo > 0) sigaddset(&oldmask, s->stop_signo);
    pthread_sigmask(SIG_SETMASK, &oldmask, NULL);
    sigaction(SIGCHLD, &oldchld, NULL);
    res->status = status;
    res->exit_code = pl_exit_code(status);

    if (got == sizeof rep) {
        res->comm[0] = 0;
        if (rep.stage == STAGE_EXISTS) {
            const char *o = plan.out_var ? plan.out_var + strlen("POOLSCOPE_OUT=") : "?";
            set_msg(msg, mcap, "%s exists; not overwriting it (use -o)", o);
            rc = PSC_EINVAL;
        } else {
            set_msg(msg, mcap, "%s: %s", s->target, strerror(rep.err));
            rc = rep.err == ENOENT ? PSC_ENOENT : PSC_EUNSUP;
        }
    }
    plan_free(&plan);
    return rc;
}

/* ---- 6. what was written -------------------------------------------------------------- */

int pl_manifest_line(char *line, long *pid, char **path)
{
    char *tab = strchr(line, '\t');
    if (!tab || tab == line) return -1;
    char *end;
    errno = 0;
    long p = strtol(line, &end, 10);
    if (errno || end != tab || p <= 0) return -1;
    char *s = tab + 1;
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
    if (!n) return -1;
    *pid = p;
    *path = s;
    return 0;
}

static void set_base(char *dst, size_t cap, const char *path)
{
    const char *b = *path ? base_name(path) : "";
    size_t n = strlen(b);
    if (n >= cap) n = cap - 1;   /* cut to fit */
    memcpy(dst, b, n);
    dst[n] = 0;
}

/* A trace without a valid END: read it with the streaming reader as far as
 * it goes, as record always did. */
static int scan_trace(const char *path, uint64_t header_bytes, pl_trace_info_t *info)
{
    int err = 0;
    pst_reader_t *r = pst_open(path, &err);
    if (!r) {
        info->err = err ? err : PSC_EIO;
        if (info->err == PSC_ETRUNC) info->truncated = 1;
        return info->err;
    }
    pst_event_t ev;
    int rc;
    uint64_t n = 0;
    while ((rc = pst_next(r, &ev)) > 0) n++;
    const pst_status_t *st = pst_status(r);
    info->events = n;
    info->err = rc < 0 ? rc : 0;
    info->lost = st->lost;
    info->streams = st->streams;
    info->truncated = st->truncated;
    info->corrupt = st->corrupt;
    uint64_t seen = st->bytes + st->unread_bytes;
    info->scanned_bytes = seen > header_bytes ? seen - header_bytes : 0;
    pst_close(r);
    return info->err;
}

int pl_trace_info(const char *path, const char *ctl_dir, pl_trace_info_t *info)
{
    memset(info, 0, sizeof *info);
    pst_end_info_t *e = malloc(sizeof *e);   /* 4 KiB of path: not on the stack */
    if (!e) return info->err = PSC_ENOMEM;
    int rc = pst_read_end(path, e);
    if (rc == PSC_ENOENT) {
        /* no END: if the process was killed, its counters file says what
         * its rings held; recovery appends END (ctl.h), then read it */
        pst_recover_info_t ri;
        if (pst_recover(path, ctl_dir, &ri) == 1) rc = pst_read_end(path, e);
    }
    if (rc == 0 || rc == PSC_ENOENT) {
        info->pid = e->pid;
        info->exec_gen = e->exec_gen;
        info->parent_pid = e->parent_pid;
        set_base(info->exe, sizeof info->exe, e->exe);
        set_base(info->arg0, sizeof info->arg0, e->argv0);
        info->own_malloc = e->exe[0] == '/' && elf_defines_malloc(e->exe) == 1;
    }
    if (rc == 0) {
        info->from_end = 1;
        info->events = e->events;
        info->lost = e->lost;
        info->streams = e->streams;
        info->killed = (e->flags & PST_END_KILLED) != 0;
    }
    uint64_t header_bytes = e->header_bytes;
    free(e);
    if (rc == 0) return 0;
    if (rc != PSC_ENOENT) return info->err = rc;
    return scan_trace(path, header_bytes, info);
}

/* ---- untraced children (see the top of this file) -------------------------------- */

typedef struct chunk_at { uint64_t off; uint32_t len, crc; uint8_t version; uint16_t flags; uint8_t kind; } chunk_at_t;

typedef struct tail {
    int fd;
    uint64_t bytes;        /* read so far, headers and payloads */
    uint8_t *buf;
    size_t cap;
    pst_inflate_t z;       /* compressed chunks (format 1.5) */
} tail_t;

static int read_at(tail_t *t, void *dst, size_t len, uint64_t off)
{
    size_t n = 0;
    while (n < len) {
        ssize_t r = pread(t->fd, (char *)dst + n, len - n, (off_t)(off + n));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return PSC_EIO;
        n += (size_t)r;
    }
    t->bytes += len;
    return 0;
}

/* The payload of a chunk into t->buf, CRC checked, then as version 1 holds
 * it (decompressed) at *pl. */
static int read_payload(tail_t *t, const chunk_at_t *c, const uint8_t **pl, size_t *plen)
{
    if (c->len > t->cap) {
        uint8_t *b = realloc(t->buf, c->len);
        if (!b) return PSC_ENOMEM;
        t->buf = b;
        t->cap = c->len;
    }
    int rc = read_at(t, t->buf, c->len, c->off + PST_CHUNK_HDR);
    if (rc) return rc;
    if (pst_crc32c(0, t->buf, c->len) != c->crc) return PSC_ECORRUPT;
    pst_chunk_hdr_t h = { .kind = c->kind, .version = c->version, .flags = c->flags, .len = c->len };   /* EVENTS: columns */
    return pst_chunk_inflate(&t->z, &h, t->buf, pl, plen);
}

/* The last record of one stream slice: its type (-1 if undecodable or
 * empty) and first field. Only the record boundaries matter, so a fresh
 * decoder state will do (A fields decode to wrong addresses, same length). */
static int last_record(const uint8_t *p, const uint8_t *end, uint32_t *idbuf, uint64_t *f0, unsigned coding)
{
    uint64_t soff;
    if (!(p = pst_get_varint(p, end, &soff))) return -1;
    static __thread pst_enc_t dec;   /* 2 KiB: not on the stack of a caller's thread */
    memset(&dec, 0, sizeof dec);
    pst_enc_init(&dec, coding, NULL);   /* the file's A coding: field lengths differ by minor */
    pst_event_t ev;
    int type = -1;
    while (p < end) {
        const uint8_t *q = pst_decode_event(&dec, p, end, &ev, idbuf);
        if (!q) return -1;
        if (ev.type != PST_EV_TS) { type = ev.type; *f0 = ev.f[0]; }
        p = q;
    }
    return type;
}

/* Look for string `id` in one META payload. 1 found (copied), 0 not, -1 damaged. */
static int meta_string(const uint8_t *p, const uint8_t *end, uint64_t id, char *out, size_t cap)
{
    while (p < end) {
        unsigned kind = *p++;
        uint64_t a, n, v;
        if (kind == PST_META_STRING) {
            if (!(p = pst_get_varint(p, end, &a)) || !(p = pst_get_varint(p, end, &n)) ||
                n > (uint64_t)(end - p))
                return -1;
            if (a == id) {
                size_t k = n < cap - 1 ? (size_t)n : cap - 1;
                memcpy(out, p, k);
                out[k] = 0;
                return 1;
            }
            p += n;
        } else if (kind == PST_META_STACK) {
            if (!(p = pst_get_varint(p, end, &a)) || !(p = pst_get_varint(p, end, &n)) || n > PST_MAX_DEPTH * 64u)
                return -1;
            for (uint64_t i = 0; i < n; i++)
                if (!(p = pst_get_varint(p, end, &v))) return -1;
        } else if (kind == PST_META_MODULE) {
            for (int i = 0; i < 4; i++)
                if (!(p = pst_get_varint(p, end, &v))) return -1;
            for (int i = 0; i < 2; i++) {   /* path, then build-id */
                if (!(p = pst_get_varint(p, end, &n)) || n > (uint64_t)(end - p)) return -1;
                p += n;
            }
        } else {
            return -1;
        }
    }
    return 0;
}

/* Did this complete trace end with an exec? 1 with the path, 0 no, negative
 * on an error (the caller then says nothing). *bytes: what was read. */
static int trace_ends_in_exec(const char *path, char *exec_path, size_t cap, uint64_t *bytes)
{
    pst_end_info_t *e = malloc(sizeof *e);
    if (!e) return PSC_ENOMEM;
    int rc = pst_read_end(path, e);
    uint64_t off = e->header_bytes, end_off = e->end_offset, streams = e->streams;
    unsigned coding = pst_coding_of_minor(e->minor);
    free(e);
    if (rc) return rc;
    if (streams == 0 || streams > (1u << 20)) return 0;   /* nothing, or damage */
    tail_t t = { .fd = open(path, O_RDONLY | O_CLOEXEC) };
    if (t.fd < 0) return PSC_EIO;
    chunk_at_t *last = calloc((size_t)streams + 1, sizeof *last), *meta = NULL;
    uint32_t *idbuf = malloc(PST_MAX_IDS * sizeof *idbuf);
    size_t n_meta = 0, cap_meta = 0;
    int found = 0;
    rc = last && idbuf ? 0 : PSC_ENOMEM;
    /* the chunk headers only, 16 bytes each */
    while (!rc && off + PST_CHUNK_HDR <= end_off) {
        uint8_t hb[PST_CHUNK_HDR];
        pst_chunk_hdr_t h;
        if ((rc = read_at(&t, hb, sizeof hb, off))) break;
        pst_get_chunk_hdr(hb, &h);
        if (h.len > PST_MAX_CHUNK || off + PST_CHUNK_HDR + h.len > end_off) break;   /* damage: stop */
        chunk_at_t c = { off, h.len, h.crc, h.version, h.flags, h.kind };
        if (h.kind == PST_CHUNK_EVENTS && h.stream >= 1 && h.stream <= streams) {
            last[h.stream] = c;
        } else if (h.kind == PST_CHUNK_META) {
            if (n_meta == cap_meta) {
                size_t nc = cap_meta ? 2 * cap_meta : 64;
                chunk_at_t *m = realloc(meta, nc * sizeof *m);
                if (!m) { rc = PSC_ENOMEM; break; }
                meta = m;
                cap_meta = nc;
            }
            meta[n_meta++] = c;
        }
        off += PST_CHUNK_HDR + h.len;
    }
    /* each stream's last slice: the exec'ing thread's ends in EXEC */
    uint64_t sid = 0, exec_off = 0;
    for (uint64_t s = 1; !rc && s <= streams; s++) {
        if (!last[s].len || last[s].off < exec_off) continue;
        const uint8_t *pl;
        size_t plen;
        int r = read_payload(&t, &last[s], &pl, &plen);
        if (r == PSC_ECORRUPT) continue;
        if ((rc = r)) break;
        uint64_t f0 = 0;
        if (last_record(pl, pl + plen, idbuf, &f0, coding) == PST_EV_EXEC) {
            sid = f0;
            exec_off = last[s].off;
            found = 1;
        }
    }
    /* its path: the latest definition before it (ids are never redefined) */
    if (!rc && found) {
        found = 0;
        for (size_t i = n_meta; i-- > 0 && !found;) {
            if (meta[i].off > exec_off) continue;
            const uint8_t *pl;
            size_t plen;
            int r = read_payload(&t, &meta[i], &pl, &plen);
            if (r == PSC_ECORRUPT) continue;
            if ((rc = r)) break;
            found = meta_string(pl, pl + plen, sid, exec_path, cap) == 1;
        }
    }
    *bytes += t.bytes;
    close(t.fd);
    free(t.buf);
    pst_inflate_done(&t.z);
    free(last);
    free(meta);
    free(idbuf);
    return rc ? rc : found;
}

static int comm_is(const char *comm, const char *name)
{
    /* the kernel keeps the first 15 bytes of the name */
    return *name && strncmp(comm, name, 15) == 0 && strlen(comm) == (strlen(name) < 15 ? strlen(name) : 15);
}

static int add_note(pl_summary_t *s, const char *line)
{
    char *dup = strdup(line);
    char **v = dup ? realloc(s->notes, (s->n_notes + 1) * sizeof *v) : NULL;
    if (!v) { free(dup); return PSC_ENOMEM; }
    s->notes = v;
    s->notes[s->n_notes++] = dup;
    return 0;
}

/* A note for entry i, or nothing. */
static int check_exec(pl_summary_t *s, size_t i, const pl_summary_opts_t *o)
{
    pl_entry_t *en = &s->entries[i];
    if (en->info.err || !en->info.from_end) return 0;   /* killed or unreadable: no exec */
    for (size_t j = 0; j < s->n; j++)                   /* a traced successor image? */
        if (j != i && s->entries[j].pid == en->pid && !s->entries[j].info.err &&
            s->entries[j].info.exec_gen > en->info.exec_gen)
            return 0;
    if (o && o->first_pid > 0 && en->pid == (long)o->first_pid) {
        if (!o->first_comm || !*o->first_comm) return 0;
        if (comm_is(o->first_comm, en->info.exe) || comm_is(o->first_comm, en->info.arg0)) return 0;
    }
    char exec_path[PATH_MAX];
    int r = trace_ends_in_exec(en->path, exec_path, sizeof exec_path, &en->info.scanned_bytes);
    if (r <= 0) return r == PSC_ENOMEM ? r : 0;
    /* an exec that failed (nothing there to run) is not an untraced child */
    char resolved[PATH_MAX];
    if (pl_resolve_cmd(exec_path, NULL, resolved, sizeof resolved, NULL, 0)) return 0;
    if (o && o->follow_exec && *o->follow_exec &&
        fnmatch(o->follow_exec, exec_path, 0) != 0 && fnmatch(o->follow_exec, resolved, 0) != 0 &&
        fnmatch(o->follow_exec, base_name(resolved), 0) != 0)
        return 0;   /* left untraced on purpose */
    /* a target LD_PRELOAD cannot reach is untraced for another reason */
    const char *why = "its environment dropped LD_PRELOAD";
    char tmsg[PL_MSG_MAX];
    if (pl_check_target(resolved, tmsg, sizeof tmsg) == PSC_EUNSUP) {
        struct stat st;
        why = stat(resolved, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID))
            ? "it is setuid or setgid: the loader ignores LD_PRELOAD"
            : "it is statically linked: LD_PRELOAD cannot reach it";
    }
    char line[PATH_MAX + 128];
    snprintf(line, sizeof line, "pid %ld: child exec'd %s without the tracer (%s)", en->pid, resolved, why);
    return add_note(s, line);
}

/* ---- silent gaps (see the top of this file) ------------------------------------------ */

/* Does this complete trace hold a malloc-family event? 1 yes (reading
 * stopped there), 0 none in the whole trace, negative: cannot tell. Only
 * record types matter, so each EVENTS chunk is decoded with a fresh state
 * (as last_record does). *bytes: what was read. */
static int trace_has_heap_call(const char *path, uint64_t *bytes)
{
    pst_end_info_t *e = malloc(sizeof *e);
    if (!e) return PSC_ENOMEM;
    int rc = pst_read_end(path, e);
    uint64_t off = e->header_bytes, end_off = e->end_offset;
    unsigned coding = pst_coding_of_minor(e->minor);
    free(e);
    if (rc) return rc;
    tail_t t = { .fd = open(path, O_RDONLY | O_CLOEXEC) };
    if (t.fd < 0) return PSC_EIO;
    uint32_t *idbuf = malloc(PST_MAX_IDS * sizeof *idbuf);
    pst_enc_t *dec = malloc(sizeof *dec);
    int found = 0;
    rc = idbuf && dec ? 0 : PSC_ENOMEM;
    while (!rc && !found && off + PST_CHUNK_HDR <= end_off) {
        uint8_t hb[PST_CHUNK_HDR];
        pst_chunk_hdr_t h;
        if ((rc = read_at(&t, hb, sizeof hb, off))) break;
        pst_get_chunk_hdr(hb, &h);
        if (h.len > PST_MAX_CHUNK || off + PST_CHUNK_HDR + h.len > end_off) { rc = PSC_ECORRUPT; break; }
        chunk_at_t c = { off, h.len, h.crc, h.version, h.flags, h.kind };
        off += PST_CHUNK_HDR + h.len;
        if (h.kind != PST_CHUNK_EVENTS) continue;
        const uint8_t *p, *end;
        size_t plen;
        if ((rc = read_payload(&t, &c, &p, &plen))) break;
        end = p + plen;
        uint64_t soff;
        if (!(p = pst_get_varint(p, end, &soff))) { rc = PSC_ECORRUPT; break; }
        memset(dec, 0, sizeof *dec);
        pst_enc_init(dec, coding, NULL);
        while (p < end) {
            pst_event_t ev;
            const uint8_t *q = pst_decode_event(dec, p, end, &ev, idbuf);
            if (!q) { rc = PSC_ECORRUPT; break; }
            if (ev.type >= PST_EV_MALLOC && ev.type <= PST_EV_PVALLOC) { found = 1; break; }
            p = q;
        }
    }
    *bytes += t.bytes;
    close(t.fd);
    free(t.buf);
    pst_inflate_done(&t.z);
    free(idbuf);
    free(dec);
    return rc ? rc : found;
}

static int untraced_cmp(const void *a, const void *b)
{
    const pl_untraced_t *x = a, *y = b;
    return x->err != y->err ? (x->err < y->err ? -1 : 1) : x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* The interposer's "<pid>.<k>.untraced" -> "<errno>" links in the
 * counters directory (hooks_proc.c), sorted by errno then pid. */
static int read_untraced(pl_summary_t *s, const char *dir)
{
    DIR *d = dir && *dir ? opendir(dir) : NULL;
    if (!d) return 0;
    struct dirent *de;
    size_t cap = 0;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        char *end;
        errno = 0;
        long pid = strtol(de->d_name, &end, 10);
        if (errno || pid <= 0 || end == de->d_name || *end != '.') continue;
        char *dot = end + 1;
        strtoul(dot, &end, 10);
        if (end == dot || strcmp(end, ".untraced")) continue;
        char p[PATH_MAX], target[32];
        struct stat st;
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p) continue;
        if (lstat(p, &st) != 0 || !S_ISLNK(st.st_mode) || st.st_uid != geteuid()) continue;
        ssize_t n = readlink(p, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = 0;
        long err = strtol(target, &end, 10);
        if (*end || err < 0 || err > 4095) err = 0;
        if (s->n_untraced == cap) {
            size_t nc = cap ? 2 * cap : 16;
            pl_untraced_t *v = realloc(s->untraced, nc * sizeof *v);
            if (!v) { rc = PSC_ENOMEM; break; }
            s->untraced = v;
            cap = nc;
        }
        s->untraced[s->n_untraced++] = (pl_untraced_t){ pid, (int)err };
    }
    closedir(d);
    if (s->n_untraced) qsort(s->untraced, s->n_untraced, sizeof *s->untraced, untraced_cmp);
    return rc;
}

/* One note per errno: "record: N child process(es) (pid(s) ...) was/were
 * not traced: could not open its/their trace(s) (why)". */
static int note_untraced(pl_summary_t *s)
{
    for (size_t i = 0; i < s->n_untraced;) {
        size_t j = i;
        while (j < s->n_untraced && s->untraced[j].err == s->untraced[i].err) j++;
        size_t n = j - i;
        char why[128], pids[400];
        if (s->untraced[i].err) {
            snprintf(why, sizeof why, "%s", strerror(s->untraced[i].err));
            why[0] = (char)(why[0] >= 'A' && why[0] <= 'Z' ? why[0] - 'A' + 'a' : why[0]);
        } else {
            snprintf(why, sizeof why, "reason unknown");
        }
        size_t o = 0;
        for (size_t k = i; k < j && o < sizeof pids; k++) {
            if (k - i == 20) { snprintf(pids + o, sizeof pids - o, ", and %zu more", j - k); break; }
            o += (size_t)snprintf(pids + o, sizeof pids - o, "%s%ld", k > i ? ", " : "", s->untraced[k].pid);
        }
        char line[700];
        if (n == 1)
            snprintf(line, sizeof line, "record: 1 child process (pid %s) was not traced: could not open its trace (%s)",
                     pids, why);
        else
            snprintf(line, sizeof line, "record: %zu child processes (pids %s) were not traced: could not open "
                     "their traces (%s)", n, pids, why);
        if (add_note(s, line)) return PSC_ENOMEM;
        i = j;
    }
    return 0;
}

/* Entry i, a complete trace of a program with its own malloc: read up to
 * its first malloc-family event; none at all is a note (once per
 * program). */
static int check_no_heap(pl_summary_t *s, size_t i)
{
    pl_entry_t *en = &s->entries[i];
    if (!en->info.own_malloc || en->info.err || !en->info.from_end) return 0;
    int r = trace_has_heap_call(en->path, &en->info.scanned_bytes);
    if (r == PSC_ENOMEM) return r;
    if (r != 0) return 0;   /* a heap call, or cannot tell */
    en->info.no_heap = 1;
    s->n_no_heap++;
    for (size_t j = 0; j < i; j++)
        if (s->entries[j].info.no_heap && !strcmp(s->entries[j].info.exe, en->info.exe))
            return 0;   /* said already for this program */
    char prog[4 * sizeof en->info.exe], line[sizeof prog + 256];
    psc_esc_text(en->info.exe, prog, sizeof prog);
    snprintf(line, sizeof line, "record: %s made no heap calls the tracer could see: it may use its own "
             "allocator (statically linked malloc, or jemalloc/tcmalloc linked in); only mmap calls were "
             "recorded", prog);
    return add_note(s, line);
}

/* ---- the summary ------------------------------------------------------------------------ */

void pl_summary_free(pl_summary_t *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->entries[i].path);
    for (size_t i = 0; i < s->n_notes; i++) free(s->notes[i]);
    free(s->entries);
    free(s->notes);
    free(s->untraced);
    free(s);
}

pl_summary_t *pl_summary_read(const char *manifest, const pl_summary_opts_t *opts, int *err)
{
    int dummy;
    if (!err) err = &dummy;
    *err = 0;
    pl_summary_t *s = calloc(1, sizeof *s);
    if (!s) { *err = PSC_ENOMEM; return NULL; }
    FILE *f = manifest ? fopen(manifest, "r") : NULL;
    char *line = NULL;
    size_t lcap = 0, cap = 0;
    int rc = 0;
    while (f && !rc && getline(&line, &lcap, f) > 0) {
        long pid;
        char *path;
        if (!strncmp(line, "note\t", 5)) {   /* a line the interposer has for the user (python.c) */
            line[strcspn(line, "\r\n")] = 0;
            if (line[5] && add_note(s, line + 5)) { rc = PSC_ENOMEM; break; }
            continue;
        }
        if (pl_manifest_line(line, &pid, &path)) continue;
        if (s->n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            pl_entry_t *v = realloc(s->entries, nc * sizeof *v);
            if (!v) { rc = PSC_ENOMEM; break; }
            s->entries = v;
            cap = nc;
        }
        pl_entry_t *en = &s->entries[s->n];
        memset(en, 0, sizeof *en);
        if (!(en->path = strdup(path))) { rc = PSC_ENOMEM; break; }
        en->pid = pid;
        s->n++;
        if (pl_trace_info(path, opts ? opts->ctl_dir : NULL, &en->info) == PSC_ENOMEM) rc = PSC_ENOMEM;
    }
    free(line);
    if (f) fclose(f);
    for (size_t i = 0; i < s->n && !rc; i++) rc = check_exec(s, i, opts);
    if (!rc) rc = read_untraced(s, opts ? opts->ctl_dir : NULL);
    if (!rc) rc = note_untraced(s);
    for (size_t i = 0; i < s->n && !rc; i++) rc = check_no_heap(s, i);
    if (rc) {
        pl_summary_free(s);
        *err = rc;
        return NULL;
    }
    return s;
}

size_t pl_summary_print(const pl_summary_t *s, const char *expected_out, FILE *out)
{
    size_t listed = s ? s->n : 0;
    for (size_t i = 0; i < listed; i++) {
        const pl_entry_t *en = &s->entries[i];
        const pl_trace_info_t *in = &en->info;
        if (in->err && in->err != PSC_ETRUNC) {
            fprintf(out, "poolscope: pid %ld: %s: unreadable trace (%s)\n", en->pid, en->path,
                    psc_strerror(in->err));
            continue;
        }
        fprintf(out, "poolscope: pid %ld: %s: %llu events", en->pid, en->path,
                (unsigned long long)in->events);
        if (in->lost) fprintf(out, ", %llu lost", (unsigned long long)in->lost);
        if (in->killed) fputs(", killed (SIGKILL or OOM): the lost count is exact", out);
        if (in->truncated) fputs(", truncated (the process did not finish cleanly)", out);
        if (in->corrupt) fputs(", corrupt (reading stopped at a damaged chunk)", out);
        if (in->exe[0]) fprintf(out, " [%s]", in->exe);
        fputc('\n', out);
    }
    for (size_t i = 0; s && i < s->n_notes; i++) fprintf(out, "poolscope: %s\n", s->notes[i]);
    if (!listed)
        fprintf(out, "poolscope: no trace was written%s%s%s\n",
                expected_out ? " to " : "", expected_out ? expected_out : "",
                " (the program may have exited before the tracer started)");
    return listed;
}
