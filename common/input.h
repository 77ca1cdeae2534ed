/* input.h — what a command checks of a file before it reads it.
 *
 * Every reading command (report, replay, sql, export, html, plot, diff,
 * gate) used to open whatever it was given and read: /dev/zero or a huge
 * file read whole into memory grew to gigabytes, a FIFO nobody writes to
 * blocked for ever in open(), a directory failed somewhere inside the
 * reader (issue 25, item 6). psc_input_check looks first, without blocking
 * and without consuming a byte of a pipe:
 *
 *   - a directory, a device (/dev/zero, /dev/urandom, a terminal) or any
 *     other file that is neither a regular file nor a pipe is refused;
 *   - a regular file must begin as one of the kinds the command reads
 *     (a trace's magic, a JSON object's '{' after blanks); an empty or
 *     shorter file whose bytes agree so far is let through, for the
 *     reader's own "truncated header" message. A kind read whole into
 *     memory has a size bound, checked on the file's size;
 *   - a pipe (standard input, /dev/fd/N) is let through: it is already open
 *     and read once, as a stream, and its reader checks the first bytes
 *     (psc_read_capped's callback). A named FIFO is refused unless the
 *     command opens it with psc_input_fifo_open, which does not wait for
 *     ever for a writer (replay: "FILE may be - or another pipe").
 *
 * A file that cannot be opened is let through: the command says why in its
 * own words. Messages are one line, without the file's name (the caller
 * prefixes it).
 *
 * psc_read_capped reads a stream whole (a pipe read twice, a JSON document)
 * with a bound, for the readers that must hold their input in memory.
 */
#ifndef PSC_INPUT_H
#define PSC_INPUT_H

#include <stddef.h>
#include <stdint.h>

/* Report and replay JSON documents are a few MB even for long runs. */
#define PSC_JSON_MAX ((uint64_t)64 << 20)

typedef struct psc_input_kind {
    const char *prefix;          /* the bytes it starts with */
    size_t len;                  /* their number (a magic may hold a NUL) */
    int skip_blank;              /* 1: after any blanks (JSON) */
    uint64_t max_bytes;          /* 0: no bound (read as a stream) */
    const char *what;            /* "a poolscope trace", "a JSON document" */
} psc_input_kind_t;

/* flags of psc_input_check */
enum { PSC_IN_FIFO = 1 };   /* a named FIFO is fine: the command opens it with psc_input_fifo_open */

/* 0 when path may be read as one of kinds[0..n); else PSC_EINVAL (or
 * PSC_ECORRUPT for bytes of no kind) with one line in msg. A named FIFO is
 * refused unless flags has PSC_IN_FIFO: a command that opens its input
 * again by name would wait in open() for a writer that may never come, or
 * that came and went. */
int psc_input_check(const char *path, const psc_input_kind_t *kinds, size_t n, unsigned flags, char *msg,
                    size_t msglen);

/* open(path, O_RDONLY) for a reader of streams, which never waits for ever
 * in open(): a named FIFO is opened without blocking, and refused (-1,
 * errno ENXIO, msg) when no writer comes within a few seconds; its reads
 * then block as usual. Any other file is opened as open() would. -1 with
 * msg "cannot open: WHY" on failure. */
int psc_input_fifo_open(const char *path, char *msg, size_t msglen);

/* The bound on a stream read whole into memory (a pipe): half the
 * machine's memory (4 GiB when it cannot be known). A trace that large is
 * read from a file instead. */
uint64_t psc_input_stream_max(void);

/* Everything fd has to give, into a malloc'ed buffer (*len bytes, plus a
 * NUL not counted). NULL with *err = PSC_EINVAL when there is more than max
 * bytes (0: no bound; reading stops there), PSC_EIO on a read error (errno kept),
 * PSC_ENOMEM. first, when not NULL, is called once with the first bytes
 * read (at least min(want, all) of them) and may end the read early by
 * returning non-zero (its value goes to *err). */
char *psc_read_capped(int fd, uint64_t max, size_t *len, int *err,
                      int (*first)(const char *b, size_t n, void *ctx), size_t want, void *ctx);

#endif
