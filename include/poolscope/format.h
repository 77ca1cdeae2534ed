/* format.h — the poolscope trace format (.pst), shared by every writer and
 * reader. This header is the contract; libtrace/FORMAT.md explains it for
 * people. Nothing here allocates or does I/O: the interposer compiles
 * format.c into the preload library and calls these encoders from inside
 * malloc. Public are the numbers, the layouts, pst_event_t and the three
 * functions after it; the encoder and decoder kit below the "internal: not
 * a stable API" line is for the project's own writers, reader and tools.
 *
 * Layout of a file
 *   header   "PSTRACE\0", u16 major, u16 minor, u32 tlv_len, then tlv_len
 *            bytes of [varint tag][varint len][len bytes] fields (PST_HDR_*).
 *   chunks   each a 16-byte chunk header (pst_chunk_hdr_t, little-endian)
 *            followed by `len` payload bytes whose CRC-32C is `crc`.
 *            A file cut short ends in a partial chunk: readers keep every
 *            complete chunk before it and report the truncation.
 *   end      a PST_CHUNK_END chunk written at clean exit. Its absence means
 *            the process died (SIGKILL) or the disk filled.
 *
 * Streams. Every thread writes its own event stream (stream ids are assigned
 * 1, 2, ... in registration order, never reused, so a recycled kernel tid
 * cannot be confused with a dead thread). A stream is cut into EVENTS chunks
 * at event boundaries; each EVENTS payload starts with a varint holding the
 * stream offset of its first byte, so readers can check continuity. Encoder
 * state (the address delta base, the timestamp base) carries across the
 * chunks of a stream: a stream must be decoded from its start.
 *
 * Definitions before use. Strings, stacks and module maps are global (META
 * chunks). A writer emits a definition into the META buffer before any event
 * that refers to it, and flushes pending META bytes before any EVENTS chunk,
 * so in file order a definition always precedes its first use.
 *
 * Watermarks. A writer that has flushed every stream writes a SYNC chunk
 * with the time it started that flush round: no later chunk holds an event
 * stamped earlier (but for the rare event being encoded while the round
 * read its stream, which readers count as late). It lets readers hand
 * events out without waiting for quiet threads, so their memory is bounded
 * by one flush period of events. Readers of minor 0 skip it by length.
 *
 * Time and order. There is no per-event clock read: a stream carries a
 * PST_EV_TS record every PST_TS_EVERY events (and when a writer has reason
 * to: first event, after a long gap). Events between two TS records share
 * the earlier time. Readers merge streams by time, keep each stream's own
 * order (per-stream sequence numbers), order pool events of one pool by the
 * pool's own sequence number, and, since minor 3, order the events of one
 * address across streams by the versions that VER records give them (an
 * exact order: the writer's per-address counters, pst_vslot). Older traces
 * fix cross-thread ties by causality alone: the free (or munmap, or realloc
 * away) of address a precedes the next allocation returning a.
 *
 * Mappings (minor 4). MMAP says what a mapping reserved (prot PROT_NONE:
 * address space only); MPROTECT events say which part of it was later made
 * accessible or taken back, so committed memory can be told from
 * reservations; MMAP_NAME gives a file-backed mapping its path. Neither is
 * an ordered event (no versions, no place in the merge's address rules):
 * MMAP_NAME follows its MMAP in the same stream, an MPROTECT of another
 * thread is ordered against the mapping's events by time alone.
 */
#ifndef POOLSCOPE_FORMAT_H
#define POOLSCOPE_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PST_MAGIC        "PSTRACE"   /* 8 bytes with its NUL */
#define PST_MAJOR        1
#define PST_MINOR        9   /* 1: SYNC chunks; 2: a time per event (the tick), SYNC and END fields below;
                                3: VER records (an address's version, for exact cross-thread order);
                                4: MPROTECT and MMAP_NAME events (reservations vs committed memory,
                                   names of file mappings);
                                5: addresses coded against the stream's recent addresses
                                   (pst_put_addr5), chunk version 2 and zstd-compressed payloads
                                   (PST_CHUNK_ZSTD);
                                6: compressed EVENTS in column form (columns.c: TS records and
                                   stack ids in columns of their own);
                                7: Python frames in stacks (PST_PYFRAME below);
                                8: CYC records (the cycle counter: the order of different threads'
                                   events within one tick);
                                9: STACK_TAIL records (a stack as the new inner frames of one
                                   defined before). Readers read every minor of PST_MAJOR. */
#define PST_FILE_HDR_FIXED 16        /* magic + major + minor + tlv_len */
#define PST_CHUNK_HDR    16
#define PST_MAX_CHUNK    (16u << 20) /* readers reject longer payloads as corrupt */
#define PST_TS_EVERY     64          /* events between a writer's checks that its time base still moves */
#define PST_TICK_NS      100000u     /* minor 2: the interposer's time base advances this often */
#define PST_MAX_DEPTH    128         /* deepest stack a writer records */
/* Python frames (minor 7). A stack frame at or above PST_PYFRAME_TAG is no
 * return address (user space ends below 2^57 on every 64-bit Linux) but one
 * Python frame: bits 32-55 the line being executed (0 unknown, clamped to
 * 2^24 - 1), bits 0-31 a STRING id whose bytes are the function's qualified
 * name, '\n', then its file (a qualified name never holds a newline). It
 * stands where the interpreter's evaluation frame running it was: the
 * frames of one evaluation loop innermost first, between the native frames
 * around it (libtrace/preload/python.c). */
#define PST_PYFRAME_TAG  0xfe00000000000000ull
#define PST_PYFRAME_LINE_MAX 0xffffffu
#define PST_PYFRAME(sid, line) (PST_PYFRAME_TAG | (uint64_t)((line) & PST_PYFRAME_LINE_MAX) << 32 | (uint32_t)(sid))
#define PST_IS_PYFRAME(f)  ((f) >= PST_PYFRAME_TAG)
#define PST_PYFRAME_SID(f)  ((uint32_t)(f))
#define PST_PYFRAME_LINE(f) ((uint32_t)((f) >> 32) & PST_PYFRAME_LINE_MAX)
#define PST_PYMALLOC_ARENA_NAME "[pymalloc arena]"   /* MMAP_NAME of an arena of CPython's object
                                                        allocator: its reserve, whose objects are
                                                        heap events (minor 7) */
#define PST_EXIT_STREAM_NAME "(exiting threads)"   /* THREAD_NAME of the interposer's stream for calls
                                                       made after a thread's THREAD_END */

/* ---- file header fields (TLV tags) --------------------------------------- */
enum pst_hdr_tag {
    PST_HDR_PID         = 1,  /* varint */
    PST_HDR_PPID        = 2,  /* varint */
    PST_HDR_EXE         = 3,  /* bytes: path of the executable */
    PST_HDR_ARGV        = 4,  /* bytes: arguments, each NUL-terminated */
    PST_HDR_START_REAL  = 5,  /* varint: CLOCK_REALTIME ns at trace start */
    PST_HDR_START_MONO  = 6,  /* varint: CLOCK_MONOTONIC ns at trace start; event times are relative to it */
    PST_HDR_STACKS      = 7,  /* varint: PST_STACKS_* */
    PST_HDR_DEPTH       = 8,  /* varint: stack depth limit */
    PST_HDR_PAGE_SIZE   = 9,  /* varint */
    PST_HDR_PARENT_PID  = 10, /* varint: set in a fork child's trace */
    PST_HDR_EXEC_GEN    = 11, /* varint: 0 for the first image of a pid, n after n execs */
    PST_HDR_TOOL        = 12, /* bytes: writer name and version */
    PST_HDR_HOST        = 13, /* bytes: hostname */
    PST_HDR_SCOPE_FUNCS = 14, /* bytes: the functions whose calls are recorded as scopes, "FUNC=NAME" each NUL-terminated */
    PST_HDR_ATTACH      = 15, /* varint: 1 = recorded by `poolscope attach` in a running process (an attach window) */
};
enum { PST_STACKS_NONE = 0, PST_STACKS_FP = 1, PST_STACKS_DWARF = 2 };

/* ---- chunks -------------------------------------------------------------- */
enum pst_chunk_kind {
    PST_CHUNK_META   = 1,  /* definitions: PST_META_* records */
    PST_CHUNK_EVENTS = 2,  /* a slice of one thread stream: varint stream offset, then events */
    PST_CHUNK_END    = 3,  /* varint events written, varint events lost, varint streams
                              [, varint flags (minor 2): PST_END_*] */
    PST_CHUNK_SYNC   = 4,  /* varint watermark: every event stamped earlier than this
                              (ns since trace start) is in the chunks before this one
                              [, minor 2: varint longest tick interval since the previous
                              SYNC (ns), varint bytes the tracer has mapped, varint the
                              tracer's own stream (0 none)] */
};

/* END flags (minor 2). Readers of minor 1 read three varints and ignore the rest. */
#define PST_END_KILLED 1u   /* written by `poolscope record` after the process was killed:
                               `lost` counts exactly what its rings held (ctl.h) */
#define PST_END_STOPPED 2u  /* recording stopped before the process ended (`record --duration`,
                               `--until-signal`): what is live at END is live at the stop,
                               not leaked; older readers ignore the bit */

/* Chunk versions and flags (minor 5). A minor-5 writer gives its META and
 * EVENTS chunks version 2, so readers before 1.5 stop there ("unknown chunk
 * version") instead of misreading them. In a version-2 chunk, flag
 * PST_CHUNK_ZSTD says the payload is compressed: varint raw_len (<=
 * PST_MAX_CHUNK), then one zstd frame that decompresses to exactly raw_len
 * bytes, the payload as version 1 would hold it. The CRC covers the stored
 * (compressed) bytes. Each frame stands alone: no dictionary, no state from
 * another chunk, so every chunk decodes by itself. */
#define PST_CHUNK_V1    1
#define PST_CHUNK_V2    2
#define PST_CHUNK_ZSTD  0x0001u

typedef struct pst_chunk_hdr {
    uint8_t  kind;      /* pst_chunk_kind; unknown kinds are skipped by length */
    uint8_t  version;   /* 1; minor 5: 2 for META and EVENTS (see PST_CHUNK_V2) */
    uint16_t flags;     /* version 1: 0, readers ignore unknown bits; version 2: PST_CHUNK_ZSTD */
    uint32_t stream;    /* EVENTS: stream id (>= 1); otherwise 0 */
    uint32_t len;       /* payload bytes */
    uint32_t crc;       /* CRC-32C (Castagnoli) of the payload */
} pst_chunk_hdr_t;

/* ---- META records -------------------------------------------------------- */
enum pst_meta {
    PST_META_STRING = 1,  /* id, len, bytes                                   */
    PST_META_STACK  = 2,  /* id, depth, frame[0] raw, frame[i] zigzag(f[i]-f[i-1]); innermost first */
    PST_META_MODULE = 3,  /* op (1 map, 0 unmap), ts, base, size, path len+bytes, build-id len+bytes */
    PST_META_STACK_TAIL = 4,  /* minor 9: id, depth, zigzag(id - ref), shared, then the depth -
                               * shared inner frames as STACK codes them; the outer `shared`
                               * frames are those of stack ref, defined before */
};
/* String and stack ids start at 1; 0 means "none". */

/* ---- events (in EVENTS chunks) ------------------------------------------- */
/* Each event: one type byte (bits 0-6 the type, bit 7 PST_EV_HAS_STACK: a
 * varint stack id follows), then its fields in the order of its layout
 * string (pst_event_layout), one character per field:
 *   A  an address, coded against the stream's previous address (pst_put_addr);
 *      every A field moves the base
 *   u  an unsigned varint
 *   z  a signed (zigzag) varint
 *   S  a string id (varint; defined by a META STRING record)
 *   L  a list of block ids: varint n (<= PST_MAX_IDS), ids[0] raw, then
 *      zigzag(ids[i] - ids[i-1])
 *   P  a payload: varint n (<= PST_MAX_PAYLOAD), then n zigzag values
 *   v  a 16-bit value, 2 bytes little-endian (VER records only)
 * The layouts are the contract; the table in format.c is their one copy.
 * A failed allocation is recorded with address 0. */
#define PST_EV_HAS_STACK 0x80u
#define PST_EV_TYPE_MASK 0x7fu

enum pst_ev {                    /* layout      fields                                  */
    /* layer 1: heap, from the interposer */
    PST_EV_MALLOC         = 1,   /* "Au"     ret, size                                  */
    PST_EV_CALLOC         = 2,   /* "Auu"    ret, nmemb, size                           */
    PST_EV_REALLOC        = 3,   /* "AAu"    old, ret, size (old 0: a malloc; size 0 with ret 0: a free) */
    PST_EV_REALLOCARRAY   = 4,   /* "AAuu"   old, ret, nmemb, size                      */
    PST_EV_FREE           = 5,   /* "A"      ptr (free(NULL) is not recorded)           */
    PST_EV_POSIX_MEMALIGN = 6,   /* "Auu"    ret, align, size                           */
    PST_EV_ALIGNED_ALLOC  = 7,   /* "Auu"    ret, align, size                           */
    PST_EV_MEMALIGN       = 8,   /* "Auu"    ret, align, size                           */
    PST_EV_VALLOC         = 9,   /* "Au"     ret, size                                  */
    PST_EV_PVALLOC        = 10,  /* "Au"     ret, size                                  */
    PST_EV_MMAP           = 11,  /* "Auuuzu" ret, len, prot, flags, fd, offset (file-backed unless MAP_ANONYMOUS in flags) */
    PST_EV_MUNMAP         = 12,  /* "Au"     addr, len                                  */
    PST_EV_MREMAP         = 13,  /* "AuAuu"  old, old_len, ret, new_len, flags         */
    PST_EV_MADVISE        = 14,  /* "Auu"    addr, len, advice (only advices that drop pages) */
    PST_EV_BRK            = 15,  /* "Az"     requested end, result (0 or -1)           */
    PST_EV_SBRK           = 16,  /* "zA"     increment, previous break                  */
    PST_EV_TS             = 17,  /* "u"      ns since the stream's previous TS (first: since trace start) */
    PST_EV_RSS            = 18,  /* "uuu"    resident bytes, anon resident, file resident */
    PST_EV_VER            = 19,  /* "v"      minor 3: version of the next event's next ordered address
                                            (a record like TS, not an event; see pst_vslot) */
    /* layer 2: logical tensors */
    PST_EV_TENSOR_ACQUIRE = 20,  /* "uuuuu"  tensor id, arm, dtype, n_elems, bytes      */
    PST_EV_TENSOR_RELEASE = 21,  /* "u"      tensor id                                  */
    /* layer 1 again (minor 4; numbers 22-23 were free) */
    PST_EV_MPROTECT       = 22,  /* "Auu"    addr, len, prot (successful calls only, stamped after the call) */
    PST_EV_MMAP_NAME      = 23,  /* "AS"     mapping start, path: right after the MMAP event of a
                                            successful file-backed mmap, in its stream (readlink of
                                            /proc/self/fd/<fd>; absent when that failed) */
    /* layer 3: pool internals (pool_seq: the pool's own order, stamped under its lock) */
    PST_EV_POOL_CREATE    = 24,  /* "uSuu"   pool id, name, arms, cap bytes             */
    PST_EV_POOL_ACQUIRE   = 25,  /* "uuuuuuuuu" pool id, pool_seq, arm, buf id, requested, granted, req bytes, granted bytes, hit */
    PST_EV_POOL_RECLAIM   = 26,  /* "uuuuuu" pool id, pool_seq, arm, buf id, granted bytes, cached (1) or destroyed (0) */
    PST_EV_POOL_BACKING_ALLOC = 27, /* "uuAu" pool id, pool_seq, ptr, bytes           */
    PST_EV_POOL_BACKING_FREE  = 28, /* "uuAu" pool id, pool_seq, ptr, bytes           */
    PST_EV_POOL_DESTROY   = 29,  /* "u"      pool id                                    */
    /* a record again (minor 8; number 30 was free) */
    PST_EV_CYC            = 30,  /* "u"      the cycle counter, in the writer's units, since the stream's
                                            previous CYC record (first: since the trace's base): the
                                            count of this and every later event until the next one
                                            (a record like TS, not an event; FORMAT.md, "Cycles") */
    PST_EV_KVB_CREATE     = 32,  /* "uSuuuuuu" pool id, name, block_size, n_blocks, separate_kv, grow, max_blocks, slot bytes */
    PST_EV_KVB_ALLOC      = 33,  /* "uuuzuuL" pool id, pool_seq, stream, owner, format, n_tokens, ids */
    PST_EV_KVB_TOKENS     = 34,  /* "uuuu"   pool id, pool_seq, block id, n_used        */
    PST_EV_KVB_FREE       = 35,  /* "uuL"    pool id, pool_seq, ids                     */
    PST_EV_KVB_GROW       = 36,  /* "uuuu"   pool id, pool_seq, stream, n added         */
    PST_EV_KVB_SHRINK     = 37,  /* "uuuL"   pool id, pool_seq, stream, retired ids     */
    PST_EV_KVB_EXHAUSTED  = 38,  /* "uuuzu"  pool id, pool_seq, stream, owner, n_tokens */
    PST_EV_KVB_OWNER      = 39,  /* "uuzu"   pool id, pool_seq, owner, op (1 register, 0 release) */
    PST_EV_KVB_DESTROY    = 40,  /* "u"      pool id                                    */
    /* layer 4: markers */
    PST_EV_MARK_POINT     = 44,  /* "SP"     name, payload                              */
    PST_EV_MARK_BEGIN     = 45,  /* "SuP"    name, instance id, payload                 */
    PST_EV_MARK_END       = 46,  /* "Su"     name, instance id                          */
    /* layer 5: process */
    PST_EV_THREAD_START   = 50,  /* "uu"     kernel tid, parent stream (0 unknown)      */
    PST_EV_THREAD_END     = 51,  /* ""                                                  */
    PST_EV_THREAD_NAME    = 52,  /* "S"      name                                       */
    PST_EV_FORK           = 53,  /* "u"      child pid                                  */
    PST_EV_EXEC           = 54,  /* "S"      path (written just before the exec)        */
    PST_EV_LOST           = 55,  /* "uu"     events lost, reason (PST_LOST_*)           */
    PST_EV_TRACE_ON       = 56,  /* ""       selective tracing resumed                  */
    PST_EV_TRACE_OFF      = 57,  /* ""       selective tracing paused                   */
    PST_EV_MAX            = 64
};

/* An MMAP event's flags bit the interposer sets for a thread's stack, which
 * glibc maps inside itself (FORMAT.md, "Thread stacks"): above the 32 bits
 * of any flags mmap takes, so no call of the program carries it. */
#define PST_MMAP_THREAD_STACK (1ull << 32)
#define PST_MAX_FIELDS  10
#define PST_MAX_PAYLOAD 8
#define PST_MAX_IDS     4096     /* block ids in one event; longer lists are split */

enum { PST_LOST_WRITE = 1, PST_LOST_NOBUF = 2, PST_LOST_BOOTSTRAP = 3, PST_LOST_EXEC = 4 };

/* ---- one event, as writers give it and readers hand it out ---------------- */
typedef struct pst_event {
    uint8_t  type;        /* pst_ev */
    uint32_t stream;      /* reader: the writer's stream id */
    uint32_t tid;         /* reader: kernel tid of the stream (its THREAD_START) */
    uint64_t seq;         /* reader: index of the event in its stream, from 0 (TS records not counted) */
    uint64_t ts;          /* reader: ns since trace start */
    uint32_t stack;       /* stack id, 0 = none */
    uint64_t f[PST_MAX_FIELDS]; /* the fields in layout order: A and u as is, z as
                                   (uint64_t)(int64_t), S the string id, L and P
                                   their counts */
    const uint32_t *ids;  /* L: the ids (reader: valid until the next read) */
    uint32_t n_ids;
    int64_t  payload[PST_MAX_PAYLOAD]; /* P */
    uint32_t n_payload;
    const char *str;      /* reader: the resolved S field, or NULL */
    uint32_t n_ver;       /* VER records before the event (0..2): the versions of its ordered */
    uint16_t ver[2];      /* addresses in field order (see pst_vslot); writers: written when n_ver > 0 */
    uint64_t cyc;         /* minor 8: the stream's cycle count at the event (its CYC records' sum),
                             0 none; writers: a CYC record first when it is past the stream's */
} pst_event_t;

/* Layout string of an event type (see above), or NULL for an unknown type. */
const char *pst_event_layout(unsigned type);
/* Name of an event type ("malloc", "pool_acquire", ...), or NULL if unknown. */
const char *pst_event_name(unsigned type);

/* CRC-32C of a buffer (hardware instruction when the CPU has it). */
uint32_t pst_crc32c(uint32_t crc, const void *buf, size_t len);

/* ==== internal: not a stable API ==========================================
 * Everything from here to the end of the header is the encoder and decoder
 * kit that libtrace's writer and reader, the interposer (libtrace/preload/,
 * which compiles format.c into itself and calls these from inside malloc)
 * and the project's own tools and tests share. It is installed because the
 * inline functions live here, but names, signatures and buffer sizes may
 * change with any release: programs read traces with reader.h and write
 * them with writer.h.
 * ========================================================================== */

/* ---- encoding primitives -------------------------------------------------- */
/* Longest encodings, for sizing buffers. PST_EVENT_MAX covers every event
 * but its L list; an event with ids needs PST_VARINT_MAX more per id. */
#define PST_VARINT_MAX 10
#define PST_EVENT_MAX  (8 + PST_MAX_FIELDS + PST_VARINT_MAX * (2 + PST_MAX_FIELDS + PST_MAX_PAYLOAD))
                       /* 8: two VER records; PST_MAX_FIELDS: a minor-5 A field's tag byte */

static inline uint8_t *pst_put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) { *p++ = (uint8_t)(v | 0x80); v >>= 7; }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint64_t pst_zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t  pst_unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

static inline uint8_t *pst_put_zigzag(uint8_t *p, int64_t v) { return pst_put_varint(p, pst_zigzag(v)); }

/* Address coding: the delta to the previous address of the stream. When both
 * are 16-byte aligned (malloc's usual case) the delta is stored divided by 16
 * and the low bit of the code says so: code = zigzag(delta/16) << 1 | 1;
 * otherwise code = zigzag(delta) << 1. Exact either way. */
static inline uint8_t *pst_put_addr(uint8_t *p, uint64_t *base, uint64_t addr)
{
    int64_t d = (int64_t)(addr - *base);
    uint64_t zz, flag;
    if (((addr | *base) & 15) == 0) {
        zz = pst_zigzag(d / 16); flag = 1;      /* d is a multiple of 16: exact */
    } else {
        zz = pst_zigzag(d); flag = 0;
    }
    *base = addr;
    /* code = zz << 1 | flag has 65 bits when |d| >= 2^62 (only possible for
     * unaligned deltas, e.g. from or to (void *)-1). Such a code takes the
     * full 10 bytes and the last byte carries bit 64 in its bit 1. Every
     * code below 2^64 is the plain varint, as before. */
    if (!(zz >> 63))
        return pst_put_varint(p, zz << 1 | flag);
    uint64_t lo = zz << 1 | flag;
    for (int i = 0; i < 9; i++) { *p++ = (uint8_t)(lo | 0x80); lo >>= 7; }
    *p++ = (uint8_t)(lo | 2);                   /* lo is bit 63 of the code */
    return p;
}

/* Decoding. Each returns the position after the value, or NULL when the
 * value runs past `end` or is longer than 10 bytes (corrupt). */
static inline const uint8_t *pst_get_varint(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (p >= end) return NULL;
        uint8_t b = *p++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *v = r; return p; }
    }
    return NULL;
}

static inline const uint8_t *pst_get_addr(const uint8_t *p, const uint8_t *end,
                                          uint64_t *base, uint64_t *addr)
{
    uint64_t code = 0, top = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (p >= end || shift > 63) return NULL;
        uint8_t b = *p++;
        code |= (uint64_t)(b & 0x7f) << shift;
        if (shift == 63) top = (uint64_t)(b >> 1 & 1) << 63;   /* bit 64 of the code */
        if (!(b & 0x80)) break;
    }
    int64_t d = pst_unzigzag(code >> 1 | top);
    /* unsigned arithmetic: a corrupt code must not overflow a signed multiply */
    *addr = *base + ((code & 1) ? (uint64_t)d << 4 : (uint64_t)d);
    *base = *addr;
    return p;
}

/* Per-stream encoder state (one per thread in the interposer). Zero it,
 * then pst_enc_init. */
#define PST_RECENT      256      /* minor 5: A values a stream remembers (a power of two) */
#define PST_RECENT_IDX  1024     /* minor 5: encoder's hash index over them (a power of two) */
typedef struct pst_enc {
    uint64_t last_addr;   /* base for A fields */
    uint64_t last_ts;     /* ns of the stream's previous TS record */
    uint32_t since_ts;    /* events since that TS record */
    uint32_t nver;        /* decoder: VER records read since the last event (<= 2) */
    uint16_t ver[2];      /* decoder: their values, handed to the next event */
    uint64_t last_cyc;    /* minor 8: the stream's cycle count (sum of its CYC records) */
    uint32_t coding;      /* 0: the delta coding of minors 0-4 (pst_put_addr); 1: minor 5 (pst_put_addr5) */
    uint32_t nrec;        /* minor 5: A fields coded so far in the stream */
    uint16_t *index;      /* minor 5 encoders: PST_RECENT_IDX positions (pst_recent_hash -> the low
                             16 bits of nrec at that address's latest A field); decoders: NULL */
    uint64_t recent[PST_RECENT]; /* minor 5: the last PST_RECENT A values, the one of
                             field n at recent[n % PST_RECENT] */
} pst_enc_t;

/* Set the coding of a zeroed state: PST_CODING_RECENT for a stream of a
 * file of minor >= 5 (an encoder also passes its index array, zeroed, of
 * PST_RECENT_IDX entries, which must outlive the state), else
 * PST_CODING_DELTA. */
enum { PST_CODING_DELTA = 0, PST_CODING_RECENT = 1 };
static inline void pst_enc_init(pst_enc_t *e, unsigned coding, uint16_t *index)
{
    e->coding = coding;
    e->index = index;
}
static inline unsigned pst_coding_of_minor(unsigned minor) { return minor >= 5 ? PST_CODING_RECENT : PST_CODING_DELTA; }

/* Address coding of minor 5: the way programs use addresses. A program
 * that frees a block and allocates again mostly gets a recently freed block
 * back, and frees what it allocated recently, so an address is looked up
 * among the stream's last PST_RECENT A values first: found i fields back
 * (i = 0: the previous A field), code = i << 2 | 2. A repeating program
 * repeats its indices, whatever the addresses, and a realloc that stays in
 * place codes its new block as 2 (index 0). Otherwise the delta to the
 * previous A value: both 16-byte aligned, code = zigzag(d / 16) << 1 | 1
 * (the bytes of minor 4's aligned delta); else code = 0 followed by
 * zigzag(d) as a varint. Codes with low bits 00 above 0 are reserved
 * (corrupt). Every A value then enters the recent list, which starts as
 * PST_RECENT zeros (an index into the zeros is valid and gives 0).
 *
 * The encoder finds an address through a hash index (pst_recent_hash ->
 * the position of the latest field with that hash), one probe: a hash
 * collision only costs a hit (the field is written as a delta). The
 * decoder needs no index. */
static inline uint32_t pst_recent_hash(uint64_t a)
{
    return (uint32_t)(((a >> 4) * 0x9E3779B97F4A7C15ull) >> (64 - 10)) & (PST_RECENT_IDX - 1);
}

static inline uint8_t *pst_put_addr5(pst_enc_t *e, uint8_t *p, uint64_t addr)
{
    uint32_t n = e->nrec, h = pst_recent_hash(addr);
    uint32_t pos = e->index[h], back = (uint16_t)(n - 1 - pos);   /* mod 2^16: exact within PST_RECENT */
    uint64_t base = e->last_addr;
    /* compared before the store below: back 255 names the slot it overwrites */
    int hit = back < PST_RECENT && e->recent[pos & (PST_RECENT - 1)] == addr;
    e->recent[n & (PST_RECENT - 1)] = addr;
    e->index[h] = (uint16_t)n;
    e->nrec = n + 1;
    e->last_addr = addr;
    if (hit) return pst_put_varint(p, (uint64_t)back << 2 | 2);
    int64_t d = (int64_t)(addr - base);
    if (((addr | base) & 15) == 0) {
        int64_t q = d >> 4;                          /* exact: a multiple of 16 */
        return pst_put_varint(p, (((uint64_t)q << 1) ^ (uint64_t)(q >> 63)) << 1 | 1);
    }
    *p++ = 0;
    return pst_put_varint(p, pst_zigzag(d));
}

/* Decode one minor-5 A field (pst_put_addr5). NULL when it runs past end,
 * is longer than 10 bytes, or is a reserved code. */
static inline const uint8_t *pst_get_addr5(pst_enc_t *d, const uint8_t *p, const uint8_t *end, uint64_t *addr)
{
    uint64_t code, a;
    if (!(p = pst_get_varint(p, end, &code))) return NULL;
    uint32_t n = d->nrec;
    if (code & 1) {
        int64_t q = pst_unzigzag(code >> 1);
        a = d->last_addr + ((uint64_t)q << 4);
    } else if (code & 2) {
        uint64_t back = code >> 2;
        if (back >= PST_RECENT) return NULL;
        a = d->recent[(n - 1 - (uint32_t)back) & (PST_RECENT - 1)];
    } else {
        uint64_t zz;
        if (code || !(p = pst_get_varint(p, end, &zz))) return NULL;
        a = d->last_addr + (uint64_t)pst_unzigzag(zz);
    }
    d->recent[n & (PST_RECENT - 1)] = a;
    d->nrec = n + 1;
    d->last_addr = a;
    *addr = a;
    return p;
}

/* ---- versions (minor 3) ---------------------------------------------------
 * A writer whose streams may touch one address from several threads keeps a
 * table of 2^PST_VSLOT_BITS 16-bit counters, all 0 when its trace starts.
 * Each event that frees, allocates or reallocates in place an address a
 * (the ordered addresses: malloc family, free, realloc's old and new block,
 * mmap, munmap, mremap's old and new range) adds 1 to counter pst_vslot(a)
 * (skipping 0: 65535 is followed by 1) and carries the new value in a VER
 * record before it. Frees take it before the memory is released, the others
 * after the call has returned, so the versions of one slot are in the
 * order the events really had; readers hand the events of one slot out in
 * that order. Version 0 is never written; an event without VER records is
 * unordered by versions (written while the process had one thread). The
 * slot keeps an address range's neighbours together (one 64-byte line of
 * the table covers 512 bytes) and scatters 1 MiB regions, so threads with
 * their own arenas rarely share a line of the table. */
#define PST_VSLOT_BITS 16
static inline uint32_t pst_vslot(uint64_t a)
{
    uint32_t region = (uint32_t)(((a >> 20) * 0x9E3779B97F4A7C15ull) >> (64 - PST_VSLOT_BITS));
    return (uint32_t)((a >> 4) + region) & ((1u << PST_VSLOT_BITS) - 1);
}
static inline uint16_t pst_vnext(uint16_t v) { return (uint16_t)(v + 1) ? (uint16_t)(v + 1) : 1; }

/* The ordered addresses of an event of `type` with fields f, in field order:
 * the ones its VER records give versions to (0, 1 or 2 of them; address 0,
 * a failed call's, is none, and a realloc that stayed in place has one). */
static inline unsigned pst_ver_addrs(unsigned type, const uint64_t *f, uint64_t a[2])
{
    unsigned n = 0;
    switch (type) {
    case PST_EV_MALLOC: case PST_EV_CALLOC: case PST_EV_POSIX_MEMALIGN: case PST_EV_ALIGNED_ALLOC:
    case PST_EV_MEMALIGN: case PST_EV_VALLOC: case PST_EV_PVALLOC: case PST_EV_FREE:
    case PST_EV_MMAP: case PST_EV_MUNMAP:
        if (f[0]) a[n++] = f[0];
        return n;
    case PST_EV_REALLOC: case PST_EV_REALLOCARRAY:     /* old, ret */
        if (f[0]) a[n++] = f[0];
        if (f[1] && f[1] != f[0]) a[n++] = f[1];
        return n;
    case PST_EV_MREMAP:                                /* old, old_len, ret */
        if (f[0]) a[n++] = f[0];
        if (f[2] && f[2] != f[0]) a[n++] = f[2];
        return n;
    default:        /* MPROTECT and MMAP_NAME neither allocate nor free: none */
        return 0;
    }
}

/* TS, VER and CYC are records that describe the next event, not events. */
static inline int pst_is_record(unsigned type)
{
    return type == PST_EV_TS || type == PST_EV_VER || type == PST_EV_CYC;
}

/* Encode a CYC record when the count `cyc` (units since the trace's base)
 * has moved past the stream's previous one; an equal or older count (a
 * counter read on another CPU, a shared stream) writes nothing, so the
 * next event keeps the previous count. */
static inline uint8_t *pst_put_cyc(pst_enc_t *enc, uint8_t *p, uint64_t cyc)
{
    if (cyc <= enc->last_cyc) return p;
    *p++ = PST_EV_CYC;
    p = pst_put_varint(p, cyc - enc->last_cyc);
    enc->last_cyc = cyc;
    return p;
}

static inline uint8_t *pst_put_ver(uint8_t *p, uint16_t v)
{
    p[0] = PST_EV_VER;
    p[1] = (uint8_t)v;
    p[2] = (uint8_t)(v >> 8);
    return p + 3;
}

/* Encode a TS record; `now` is ns since trace start. The writer decides when
 * (first event of a stream, then every PST_TS_EVERY events). Returns the end
 * position. */
static inline uint8_t *pst_put_ts(pst_enc_t *enc, uint8_t *p, uint64_t now)
{
    *p++ = PST_EV_TS;
    p = pst_put_varint(p, now - enc->last_ts);
    enc->last_ts = now;
    enc->since_ts = 0;
    return p;
}

/* Encode one event by its layout: type byte, optional stack id, fields from
 * ev->f / ev->ids / ev->payload. Writes at most PST_EVENT_MAX bytes, returns
 * the end position, or NULL for an unknown type or a count over its limit.
 * Does not write TS records (the caller decides when time is read). */
uint8_t *pst_encode_event(pst_enc_t *enc, uint8_t *p, const pst_event_t *ev);

/* Decode one record from [p, end) with the stream's decoder state. A TS
 * record updates dec->last_ts and comes back as an event of type PST_EV_TS.
 * ids go into `idbuf` (PST_MAX_IDS entries). Returns the position after the
 * record, or NULL on corrupt input (unknown type, truncated field, over-long
 * list). Never reads outside [p, end). */
const uint8_t *pst_decode_event(pst_enc_t *dec, const uint8_t *p, const uint8_t *end,
                                pst_event_t *ev, uint32_t *idbuf);


/* ---- helpers for writers (no allocation, no I/O) ------------------------- */
/* pst_encode_event counts the event in enc->since_ts; pst_put_ts resets it,
 * so a writer emits a TS record when enc->since_ts >= PST_TS_EVERY. */

/* Header fields for pst_put_file_header. Strings may be NULL (field left
 * out); `argv` is `argv_len` bytes of NUL-terminated arguments (the shape of
 * /proc/self/cmdline). parent_pid 0 is left out. */
typedef struct pst_file_info {
    uint64_t pid, ppid, parent_pid, exec_gen;
    uint64_t start_real_ns, start_mono_ns;
    uint32_t stacks;           /* PST_STACKS_* */
    uint32_t depth;
    uint64_t page_size;
    const char *exe;           /* NUL-terminated */
    const char *argv;
    size_t   argv_len;
    const char *tool;          /* NUL-terminated */
    const char *host;          /* NUL-terminated */
    const char *scope_funcs;   /* PST_HDR_SCOPE_FUNCS: "FUNC=NAME\0..." or NULL */
    size_t   scope_funcs_len;
    uint32_t attach;           /* PST_HDR_ATTACH: 1 an attach window (frees of blocks from before it, blocks live at its end) */
    uint16_t minor;            /* 0: PST_MINOR; an older minor for a file written as its writers did */
} pst_file_info_t;

/* Write the file header (fixed part and TLV fields) into buf. Returns the
 * bytes written, or PSC_ERANGE (-6) if `cap` is too small. */
int pst_put_file_header(uint8_t *buf, size_t cap, const pst_file_info_t *info);

/* Write the 16-byte chunk header for `len` payload bytes at `payload` (CRC
 * computed here). The header may sit right before the payload. */
void pst_put_chunk_hdr(uint8_t out[PST_CHUNK_HDR], unsigned kind, uint32_t stream,
                       const void *payload, uint32_t len);
/* The same with every field given (version 2 chunks, a CRC computed over
 * pieces by the caller). */
void pst_put_chunk_hdr_v(uint8_t out[PST_CHUNK_HDR], unsigned kind, unsigned version, unsigned flags,
                         uint32_t stream, uint32_t len, uint32_t crc);
/* Parse a 16-byte chunk header (no checks beyond byte order). */
void pst_get_chunk_hdr(const uint8_t in[PST_CHUNK_HDR], pst_chunk_hdr_t *h);

/* A chunk's payload as version 1 holds it (libtrace/rd_inflate.c; links
 * libzstd and allocates: not for the interposer). A version-2 chunk with
 * PST_CHUNK_ZSTD is decompressed into z's buffer, any other chunk returned
 * as it is. 0 with *out / *out_len (valid until the next call with z), or
 * PSC_ECORRUPT (raw_len over PST_MAX_CHUNK, a damaged or short frame, one
 * that does not give exactly raw_len bytes or is not alone in the
 * payload), PSC_ENOMEM. Zero a pst_inflate_t to start; pst_inflate_done
 * frees what it holds. */
typedef struct pst_inflate { void *dctx; uint8_t *buf; size_t cap; } pst_inflate_t;
int pst_chunk_inflate(pst_inflate_t *z, const pst_chunk_hdr_t *h, const uint8_t *payload,
                      const uint8_t **out, size_t *out_len);
void pst_inflate_done(pst_inflate_t *z);

/* META records, appended at p; return the end position. Space needed:
 * string 1+2*PST_VARINT_MAX+len, stack 1+PST_VARINT_MAX*(2+depth),
 * module 1+PST_VARINT_MAX*6+path_len+bid_len. */
uint8_t *pst_put_meta_string(uint8_t *p, uint32_t id, const char *s, size_t len);
uint8_t *pst_put_meta_stack(uint8_t *p, uint32_t id, const uint64_t *frames, uint32_t depth);
/* Stack id (frames[0..depth), innermost first) as STACK_TAIL when it
 * shares at least PST_TAIL_MIN outermost frames with stack ref
 * (ref_frames[0..ref_depth)), else as STACK: a writer's new stacks mostly
 * leave the previous one's outer frames as they were. At most
 * 1 + PST_VARINT_MAX * (4 + depth) bytes. */
#define PST_TAIL_MIN 2
uint8_t *pst_put_meta_stack_near(uint8_t *p, uint32_t id, const uint64_t *frames, uint32_t depth, uint32_t ref,
                                 const uint64_t *ref_frames, uint32_t ref_depth);
uint8_t *pst_put_meta_module(uint8_t *p, int map, uint64_t ts, uint64_t base, uint64_t size,
                             const char *path, size_t path_len,
                             const uint8_t *build_id, size_t bid_len);
/* The END chunk's payload (at most 3*PST_VARINT_MAX bytes). */
uint8_t *pst_put_end(uint8_t *p, uint64_t events, uint64_t lost, uint64_t streams);
/* SYNC payload: the watermark (ns since trace start). */
static inline uint8_t *pst_put_sync(uint8_t *p, uint64_t watermark) { return pst_put_varint(p, watermark); }
/* The start of an EVENTS payload: the stream offset of its first event byte
 * (bytes of this stream's event data written before this chunk). */
static inline uint8_t *pst_put_stream_offset(uint8_t *p, uint64_t off) { return pst_put_varint(p, off); }

#ifdef __cplusplus
}
#endif

#endif
