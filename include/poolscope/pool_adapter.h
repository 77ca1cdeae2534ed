/* pool_adapter.h — turns the pools' observer callbacks into trace events
 * (prefix psa_).
 *
 * The pools in pool/ know nothing of traces: each reports through one
 * observer callback in its config. This adapter supplies that callback,
 * with or without a tracer: a tracer attached later (poolscope attach), or
 * a fork child's own trace, must see pools made before it. Without a tracer
 * the callback returns at its first test; a pool of blocks also counts its
 * grown blocks there, so that its CREATE, emitted at the pool's first event
 * in a trace that has not named it, gives the blocks it has then.
 *
 *   bp_config_t cfg = bp_config_default();
 *   cfg.name = "acts";
 *   cfg = psa_bufpool_config(&cfg);        // emits POOL_CREATE
 *   bp_pool_t *p = bp_create(&cfg, &err);
 *   ...
 *   bp_destroy(p);
 *   psa_bufpool_destroyed(&cfg);           // emits POOL_DESTROY
 *
 * and the same with psa_blockpool_config / psa_blockpool_destroyed for a
 * kvb_pool_t. Each config gets a pool id unique in the process (1, 2, ...),
 * carried in observe_ctx, so no memory is allocated and nothing has to be
 * freed. The adapter takes the observer slot: an observer already in the
 * config is replaced.
 *
 * The pools do not report their own creation or destruction (the block pool
 * reports creation, but without a name), so the adapter emits POOL_CREATE /
 * KVB_CREATE itself: when it makes the config if recording then, else
 * before the pool's first event in each trace (names are kept up to 95
 * bytes, for the first 255 pools of a process; later pools are observed
 * only when made while recording). *_destroyed() emits the DESTROY event
 * when the trace named the pool; call it after the pool's destroy (or
 * after a failed create, to close the pool in the trace).
 *
 * Fields follow the layouts of format.h. Notes:
 *   - POOL_CREATE "arms" is a bit set: bit i set for each arm bp_arm_t i the
 *     pool serves (both: 0x3).
 *   - KVB_ALLOC/FREE/SHRINK carry at most PST_MAX_IDS ids; a longer list is
 *     split into several events with the same pool_seq (KVB_ALLOC: n_tokens
 *     on the first piece, 0 on the rest).
 *   - KVB_GROW records the number of blocks added (the new ids are
 *     consecutive from the previous highest).
 */
#ifndef POOLSCOPE_POOL_ADAPTER_H
#define POOLSCOPE_POOL_ADAPTER_H

#include <stdint.h>

#include "blockpool.h"
#include "bufpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A copy of *cfg with observe/observe_ctx set to the adapter, after emitting
 * POOL_CREATE (name, arms, cap) when recording. */
bp_config_t psa_bufpool_config(const bp_config_t *cfg);
/* Emit POOL_DESTROY for a config returned by psa_bufpool_config (nothing
 * for one the adapter did not touch). */
void psa_bufpool_destroyed(const bp_config_t *cfg);

/* The same for the block pool; `name` may be NULL ("kvb"). KVB_CREATE
 * carries the config as given (block_size, n_blocks, separate_kv,
 * grow_on_exhaustion, max_blocks) and the slot bytes it implies. */
kvb_config_t psa_blockpool_config(const kvb_config_t *cfg, const char *name);
void psa_blockpool_destroyed(const kvb_config_t *cfg);

/* The pool id the adapter gave a config, 0 if none. */
uint64_t psa_bufpool_id(const bp_config_t *cfg);
uint64_t psa_blockpool_id(const kvb_config_t *cfg);

/* The observer callbacks themselves, for a caller that wants to chain its
 * own observer: ctx is the pool id cast to a pointer. */
void psa_bufpool_observe(void *ctx, const bp_event_t *ev);
void psa_blockpool_observe(void *ctx, const kvb_event_t *ev);

#ifdef __cplusplus
}
#endif
#endif
