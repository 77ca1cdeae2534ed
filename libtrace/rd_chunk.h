/* rd_chunk.h — the first stage of the reader (rd_chunk.c; rd_internal.h
 * has the order): the input, the file header, chunks, and the definitions
 * META records make. What the later stages may call.
 */
#ifndef RD_CHUNK_H
#define RD_CHUNK_H

#include "rd_types.h"

/* An EVENTS chunk handed to the caller of rd_read_chunk: its header, its
 * payload [p, end) (inflated when it was compressed) and its file offset.
 * Valid until the next rd_read_chunk. */
typedef struct rd_chunk {
    pst_chunk_hdr_t h;
    const uint8_t *p, *end;
    uint64_t at;
} rd_chunk_t;
#define RD_CHUNK_EVENTS 2

int  rd_parse_header(pst_reader_t *r);            /* 0 or PSC_E* (pst_open's answer) */
/* Read one chunk. Every kind but EVENTS is handled here: 1 read one, 0 no
 * more, negative error. An EVENTS chunk is left to the caller (the decode
 * stage): RD_CHUNK_EVENTS with it in *c, not consumed until the caller
 * ends it with rd_chunk_done. */
int  rd_read_chunk(pst_reader_t *r, rd_chunk_t *c);
/* The end of chunk c, rc being what its processing answered (0 or a
 * negative error): consumed and counted unless that failed or it was found
 * corrupt. rd_read_chunk's answers. */
int  rd_chunk_done(pst_reader_t *r, const rd_chunk_t *c, int rc);
void rd_set_corrupt(pst_reader_t *r, uint64_t at, const char *why);

#endif
