/* launch_summary.c — what record says after the run (launch.h, step 6):
 * each image's trace read from its END (or streamed as far as it goes),
 * the images that exec'd an untraced program, fork children that ran
 * untraced, programs whose own malloc hid every heap call; the notes
 * printed. The rules are at the top of launch.c. */
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
        if (!pst_is_record(ev.type)) { type = ev.type; *f0 = ev.f[0]; }
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
        } else if (kind == PST_META_STACK_TAIL) {   /* id, depth, id - ref, shared, depth - shared frames */
            uint64_t k;
            if (!(p = pst_get_varint(p, end, &a)) || !(p = pst_get_varint(p, end, &n)) ||
                !(p = pst_get_varint(p, end, &v)) || !(p = pst_get_varint(p, end, &k)) || k > n ||
                n > PST_MAX_DEPTH * 64u)
                return -1;
            for (uint64_t i = 0; i < n - k; i++)
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
        fnmatch(o->follow_exec, pl_base_name(resolved), 0) != 0)
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
