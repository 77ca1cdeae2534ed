/* api_link.cpp — a C++ program built against the INSTALLED package only:
 * tests/integration/install.sh compiles it with
 *     c++ -std=c++11|c++17 -Wall -Wextra -Werror api_link.cpp \
 *         $(pkg-config --cflags --libs poolscope poolscope-pool)
 * and runs it, plain and under the installed `poolscope record`. It fails to
 * compile if a header is not C++-clean, and fails to link if a header lost
 * its extern "C" (the names would be mangled).
 *
 *   api_link TRACE     write TRACE with the writer, read it back with the
 *                      reader, and use the event API and both pools
 *
 * Prints key=value lines (the same traced or not but for api=):
 *   api=0|1                   a tracer is present (ps_active)
 *   cxx.tensors=N             tensors announced with ps_tensor_acquire/release
 *   bufpool.acquires= hits= misses=      bp_stats of the adapter-observed pool
 *   blockpool.allocated= in_use_after_free=   blocks of one 40-token allocate
 *   read.pid= read.events= read.malloc= read.free= read.mark_begin=
 *   read.complete=            what the reader found in TRACE
 * Exit 0, 1 when a library call fails (with psc_strerror's sentence).
 */
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <poolscope/blockpool.h>
#include <poolscope/bufpool.h>
#include <poolscope/error.h>
#include <poolscope/format.h>
#include <poolscope/pool_adapter.h>
#include <poolscope/poolscope.h>
#include <poolscope/reader.h>
#include <poolscope/writer.h>

namespace {

int fail(const char *what, int err)
{
    std::fprintf(stderr, "api_link: %s: %s\n", what, psc_strerror(err));
    return 1;
}

/* The event API: a scope with a payload, a thread name, tensors. */
unsigned annotate()
{
    ps_thread_name("cxx-main");
    const int64_t payload[2] = { 3, 5 };
    ps_begin("cxx", 1, payload, 2);
    unsigned n = 0;
    for (uint64_t id = 1; id <= 4; id++, n++) {
        ps_tensor_acquire(id, 0, BP_DT_F32, 256, 1024);
        ps_tensor_release(id);
    }
    ps_mark("cxx.point", payload, 1);
    ps_end("cxx", 1);
    return n;
}

/* A buffer pool through the adapter: two misses, then a hit. */
int bufpool()
{
    int err = 0;
    bp_config_t cfg = bp_config_default();
    cfg.name = "cxx-acts";
    cfg = psa_bufpool_config(&cfg);
    bp_pool_t *pool = bp_create(&cfg, &err);
    if (!pool) return fail("bp_create", err);
    bp_buf_t *a = bp_acquire(pool, 100, &err);
    bp_buf_t *b = bp_acquire(pool, 100, &err);
    if (!a || !b) return fail("bp_acquire", err);
    bp_release(a);
    bp_buf_t *c = bp_acquire(pool, 90, &err);
    if (!c) return fail("bp_acquire", err);
    bp_stats_t st;
    bp_stats(pool, &st);
    bp_release(b);
    bp_release(c);
    if ((err = bp_destroy(pool)) != 0) return fail("bp_destroy", err);
    psa_bufpool_destroyed(&cfg);
    std::printf("bufpool.acquires=%llu\nbufpool.hits=%llu\nbufpool.misses=%llu\n",
                static_cast<unsigned long long>(st.acquires), static_cast<unsigned long long>(st.hits),
                static_cast<unsigned long long>(st.misses));
    return 0;
}

/* A block pool through the adapter: 40 tokens at block size 16. */
int blockpool()
{
    int err = 0;
    kvb_config_t cfg = kvb_config_default();
    cfg.block_size = 16;
    cfg.n_blocks = 16;
    cfg = psa_blockpool_config(&cfg, "cxx-kv");
    kvb_pool_t *pool = kvb_create(&cfg, &err);
    if (!pool) return fail("kvb_create", err);
    std::vector<int32_t> ids(8);
    int n = kvb_allocate(pool, KVB_STREAM_K, 40, 7, KVB_FMT_F32, ids.data(), static_cast<int32_t>(ids.size()));
    if (n < 0) return fail("kvb_allocate", n);
    kvb_free_all(pool, 7);
    kvb_stats_t st;
    kvb_stats(pool, &st);
    kvb_destroy(pool);
    psa_blockpool_destroyed(&cfg);
    std::printf("blockpool.allocated=%d\nblockpool.in_use_after_free=%lld\n", n,
                static_cast<long long>(st.blocks_in_use));
    return 0;
}

/* A small trace with the writer (PST_EMIT is the C++ form here). */
int write_trace(const char *path)
{
    int err = 0;
    pst_writer_cfg_t cfg = {};
    cfg.pid = 4242;
    cfg.exe = "/bin/api_link";
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    if (!w) return fail(path, err);
    const uint64_t base = 0x10000;
    const int size = 64;
    pst_writer_time(w, 1000);
    uint32_t name = pst_writer_string(w, "cxx");
    PST_EMIT(w, 1, PST_EV_MARK_BEGIN, name, 1, 0);
    for (int i = 0; i < 3; i++) PST_EMIT(w, 1, PST_EV_MALLOC, base + 0x100 * static_cast<uint64_t>(i), size);
    pst_writer_time(w, 2000);
    PST_EMIT(w, 2, PST_EV_FREE, base);
    PST_EMIT(w, 1, PST_EV_MARK_END, name, 1);
    if ((err = pst_writer_close(w)) != 0) return fail(path, err);
    return 0;
}

/* Read it back: counts by event name. */
int read_trace(const char *path)
{
    int err = 0;
    pst_reader_t *r = pst_open(path, &err);
    if (!r) return fail(path, err);
    std::map<std::string, unsigned long> by_name;
    pst_event_t ev;
    int rc;
    while ((rc = pst_next(r, &ev)) > 0) {
        const char *nm = pst_event_name(ev.type);
        by_name[nm ? nm : "?"]++;
    }
    if (rc < 0) { pst_close(r); return fail(path, rc); }
    const pst_status_t *st = pst_status(r);
    std::printf("read.pid=%llu\nread.events=%llu\nread.malloc=%lu\nread.free=%lu\nread.mark_begin=%lu\n"
                "read.complete=%d\n",
                static_cast<unsigned long long>(pst_header(r)->pid),
                static_cast<unsigned long long>(st->events), by_name["malloc"], by_name["free"],
                by_name["mark_begin"], st->complete);
    pst_close(r);
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: api_link TRACE\n");
        return 2;
    }
    std::printf("api=%d\n", ps_active());
    std::printf("cxx.tensors=%u\n", annotate());
    if (bufpool() || blockpool() || write_trace(argv[1]) || read_trace(argv[1])) return 1;
    return 0;
}
