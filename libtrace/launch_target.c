/* launch_target.c — record's checks of the command (launch.h, step 2):
 * the command resolved through PATH, and the target an ELF the preload
 * library can reach (an interpreter, not static, not setuid), with its
 * exit code when it cannot be run. */
#include "launch.h"
#include "launch_int.h"
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

/* ---- 2. the command -------------------------------------------------------------- */

int pl_resolve_exit_code(int err)
{
    return err == PSC_ENOENT || err == PSC_ERANGE ? PL_EXIT_NOT_FOUND : PL_EXIT_NOT_EXEC;
}

int pl_resolve_cmd(const char *name, const char *path_env, char *out, size_t cap,
                   char *msg, size_t mcap)
{
    if (!name || !*name) { pl_set_msg(msg, mcap, "empty command name"); return PSC_ENOENT; }
    if (strchr(name, '/')) {
        struct stat st;
        if (strlen(name) >= cap) { pl_set_msg(msg, mcap, "%.64s...: path too long", name); return PSC_ERANGE; }
        if (stat(name, &st) != 0) { pl_set_msg(msg, mcap, "%s: %s", name, strerror(errno)); return PSC_ENOENT; }
        if (!S_ISREG(st.st_mode) || access(name, X_OK) != 0) {
            pl_set_msg(msg, mcap, "%s: not an executable file", name);
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
        if (n > 0 && (size_t)n < cap && pl_is_exec_file(out)) return 0;
        if (!colon) break;
        path = colon + 1;
    }
    if (cap) out[0] = 0;
    pl_set_msg(msg, mcap, "%s: command not found", name);
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
int pl_elf_defines_malloc(const char *path)
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
        pl_set_msg(msg, mcap, "%s: %s", path, strerror(e));
        return e == ENOENT || e == ENOTDIR ? PSC_ENOENT : PSC_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
        pl_set_msg(msg, mcap, "%s: not a regular file", path);
        return PSC_EINVAL;
    }
    if (st.st_mode & (S_ISUID | S_ISGID)) {
        pl_set_msg(msg, mcap, "%s is set%s: the loader ignores LD_PRELOAD for it, refusing to record",
                path, (st.st_mode & S_ISUID) ? "uid" : "gid");
        return PSC_EUNSUP;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { pl_set_msg(msg, mcap, "%s: %s", path, strerror(errno)); return PSC_EIO; }
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
        pl_set_msg(msg, mcap, "%s is statically linked: LD_PRELOAD cannot trace it, refusing to record", path);
        return PSC_EUNSUP;
    }
    if (r == -2) {
        pl_set_msg(msg, mcap, "%s: malformed ELF file", path);
        return PSC_ECORRUPT;
    }
    return 0;   /* dynamic ELF, or something execvp hands to /bin/sh */
}

int pl_check_target(const char *path, char *msg, size_t mcap)
{
    if (!path || !*path) { pl_set_msg(msg, mcap, "empty target path"); return PSC_ENOENT; }
    return check_target(path, 0, msg, mcap);
}
