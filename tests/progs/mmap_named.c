/* mmap_named.c — the mappings format 1.4 describes: a named file mapping,
 * a PROT_NONE reservation committed in part with mprotect, and the calls
 * that must leave no MMAP_NAME or MPROTECT behind.
 *
 *   mmap_named -d DIR -f FACTS
 *
 * In DIR it creates a temporary file of 64 KiB and maps it (MMAP_NAME: the
 * file's real path), maps anonymous memory with that fd given (no name: the
 * fd of MAP_ANONYMOUS is ignored), fails a file mmap on a closed fd (no
 * name), reserves 64 MiB PROT_NONE and mprotects 4 MiB of it, 8 MiB in,
 * read-write and touches it (MPROTECT), fails an unaligned mprotect (not
 * recorded), and maps the file once more after unlinking it (MMAP_NAME:
 * the path with " (deleted)"). Everything is unmapped before exit. Under
 * the tracer it also tries to forge both events through the event API
 * (an mprotect of 0x1000, a name "/api/forged"), which must refuse them.
 *
 * stdout is the same in every run (no addresses): what the calls returned,
 * errno of the failed ones (the tracer must keep it), a checksum of the
 * file's bytes. FACTS gets key=value lines with the addresses, lengths,
 * prot and paths, for a test to find in the trace. Exit 0, 1 if a call
 * did not do what it should, 2 on usage.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "poolscope/format.h"
#include "poolscope/poolscope.h"

#define FILE_LEN    (64u << 10)
#define RESERVE_LEN ((size_t)64 << 20)
#define COMMIT_OFF  ((size_t)8 << 20)
#define COMMIT_LEN  ((size_t)4 << 20)

static int die(const char *what)
{
    printf("FAIL %s: %s\n", what, strerror(errno));
    return 1;
}

static const char *errname(int e)
{
    return e == EBADF ? "EBADF" : e == EINVAL ? "EINVAL" : e == ENOMEM ? "ENOMEM" : "other";
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *facts_path = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-d")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "-f")) facts_path = argv[i + 1];
    }
    if (!dir || !facts_path || argc != 5) {
        fprintf(stderr, "usage: mmap_named -d DIR -f FACTS\n");
        return 2;
    }
    FILE *facts = fopen(facts_path, "w");
    if (!facts) return die("open facts");

    /* a named file of known bytes */
    char path[PATH_MAX], real[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/mmap_named.XXXXXX", dir) >= (int)sizeof path) return 2;
    int fd = mkstemp(path);
    if (fd < 0) return die("mkstemp");
    static unsigned char bytes[FILE_LEN];
    for (unsigned i = 0; i < FILE_LEN; i++) bytes[i] = (unsigned char)(i * 7 + 3);
    if (write(fd, bytes, FILE_LEN) != (ssize_t)FILE_LEN) return die("write");
    if (!realpath(path, real)) return die("realpath");

    /* 1. a file mapping: MMAP then MMAP_NAME */
    unsigned char *fm = mmap(NULL, FILE_LEN, PROT_READ, MAP_PRIVATE, fd, 0);
    if (fm == MAP_FAILED) return die("mmap file");
    unsigned long sum = 0;
    for (unsigned i = 0; i < FILE_LEN; i++) sum = sum * 31 + fm[i];
    printf("file mapping: %u bytes, checksum %lu\n", FILE_LEN, sum);

    /* 2. MAP_ANONYMOUS with an fd: anonymous, no name */
    void *af = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
    if (af == MAP_FAILED) return die("mmap anonymous with fd");
    printf("anonymous mapping with an fd: ok\n");

    /* 3. a failed file mapping: no name, errno kept */
    int closed = dup(fd);
    if (closed < 0 || close(closed)) return die("dup/close");
    errno = 0;
    void *bad = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, closed, 0);
    if (bad != MAP_FAILED) { printf("FAIL mmap on a closed fd succeeded\n"); return 1; }
    printf("mmap on a closed fd: MAP_FAILED errno=%s\n", errname(errno));

    /* 4. a reservation, committed in part */
    unsigned char *res = mmap(NULL, RESERVE_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) return die("mmap reserve");
    unsigned char *commit = res + COMMIT_OFF;
    if (mprotect(commit, COMMIT_LEN, PROT_READ | PROT_WRITE)) return die("mprotect commit");
    memset(commit, 0x5a, COMMIT_LEN);
    printf("reserved %zu MiB, committed %zu MiB: byte %d\n", RESERVE_LEN >> 20, COMMIT_LEN >> 20,
           commit[COMMIT_LEN - 1]);

    /* 5. a failed mprotect: not recorded, errno kept */
    errno = 0;
    int r = mprotect(res + 1, 4096, PROT_READ);
    printf("unaligned mprotect: %d errno=%s\n", r, errname(errno));
    if (r != -1) return 1;

    /* 6. the file again, after it is gone: its name says so */
    if (unlink(path)) return die("unlink");
    void *dm = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (dm == MAP_FAILED) return die("mmap deleted file");
    printf("deleted file mapping: ok\n");

    /* 7. the event API is not a way in for the interposer's own events */
    const ps_api_t *api = dlsym(RTLD_DEFAULT, "poolscope_api");
    if (api && api->emit) {
        ps_event_t ev = ps__event(PST_EV_MPROTECT);
        ev.n_fields = 3;
        ev.f[0] = 0x1000; ev.f[1] = 4096; ev.f[2] = PROT_READ;
        api->emit(&ev);
        ev = ps__event(PST_EV_MMAP_NAME);
        ev.n_fields = 2;
        ev.f[0] = 0x1000;
        ev.name = "/api/forged";
        api->emit(&ev);
    }

    fprintf(facts, "file_path=%s\nfile_map=%p\nfile_len=%u\nanon_fd_map=%p\n", real, (void *)fm, FILE_LEN, af);
    fprintf(facts, "reserve=%p\nreserve_len=%zu\nreserve_prot=%d\n", (void *)res, RESERVE_LEN, PROT_NONE);
    fprintf(facts, "mprotect_addr=%p\nmprotect_len=%zu\nmprotect_prot=%d\n", (void *)commit, COMMIT_LEN,
            PROT_READ | PROT_WRITE);
    fprintf(facts, "bad_mprotect_addr=%p\ndeleted_map=%p\n", (void *)(res + 1), dm);
    if (fclose(facts)) return die("write facts");

    if (munmap(dm, 4096) || munmap(res, RESERVE_LEN) || munmap(af, 4096) || munmap(fm, FILE_LEN))
        return die("munmap");
    close(fd);
    printf("done\n");
    return 0;
}
