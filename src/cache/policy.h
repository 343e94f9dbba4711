/* policy.h - what is worth keeping, apart from how blocks are kept
 * (DESIGN.md, "Policy layer"). The tiers (live.c, disk.c, redis_tier.c)
 * ask these functions; they never decide retention themselves.
 *
 * Three things get kept longer than plain recency would keep them:
 *   - the learned stable boundary (auto:N): the prefix a prompt shares
 *     with recent prompts, cut at a message boundary;
 *   - the anchor of a conversation: its system prompt and tools, kept
 *     POLICY_ANCHOR_TTL_S after its last use, so a new session of the
 *     same agent finds it even after hours of other traffic; a changed
 *     system prompt is a new anchor (blocks are named by tokens);
 *   - client breakpoints (Anthropic cache_control, ttl 5m or 1h).
 * Retained blocks are evicted only when nothing unretained is left, the
 * one whose retention ends first going first. Every tier (live pool,
 * disk) orders its idle blocks by the same value and key, with one hit
 * half-life; the scope of a request (what it publishes) is decided here
 * too.
 * Does not: touch blocks, files or the pool. */
#ifndef STRATA_CACHE_POLICY_H
#define STRATA_CACHE_POLICY_H

#include <stddef.h>
#include <stdint.h>

#define POLICY_ANCHOR_TTL_S 3600.0
#define POLICY_HIT_HALF_LIFE_S 600.0
#define POLICY_MAX_MARKS 8
#define POLICY_PROTECT_MS 10000   /* a block written or loaded this recently is never evicted */
#define POLICY_LONG_TTL_S 3600.0  /* a mark this long is a "1h" cache write (Anthropic usage) */
#define POLICY_RECENT_MAX 16   /* prompts remembered for the auto scope */
#define POLICY_AUTO_LOOK 8     /* "auto" looks at the last 8 of them */
#define POLICY_SCOPE_MAX_TOKENS (1 << 30)
#define POLICY_BREAK_TTL_S 300.0       /* a cache_control breakpoint without ttl: 5 min */
#define POLICY_MAX_TTL_S (24 * 3600.0) /* the longest retention a client may ask for */
#define POLICY_SHARED_TTL_S 3600.0     /* default expiry of a block in the shared tier (--cache-redis-ttl) */

/* What of a prompt a request publishes for reuse (its cache scope). */
typedef enum cache_scope_kind {
    SCOPE_DEFAULT = 0, /* the server's default scope */
    SCOPE_FULL,        /* everything */
    SCOPE_OFF,         /* nothing */
    SCOPE_TOKENS,      /* the first n tokens */
    SCOPE_AUTO,        /* the prefix shared with one of the last n prompts */
} cache_scope_kind;

typedef struct cache_scope {
    cache_scope_kind kind;
    int n;
} cache_scope;

/* Parses "off", "full", "auto" (last POLICY_AUTO_LOOK prompts), "auto:N"
 * (N in 1..POLICY_RECENT_MAX) or a token count (0 is off). -1 if invalid. */
int policy_scope_parse(const char *text, cache_scope *out);
/* A client's retention ttl ("5m", "1h", any N s/m/h; NULL: the default)
 * in seconds: finite, > 0 and at most POLICY_MAX_TTL_S. -1 if not. */
int policy_ttl_parse(const char *text, double *ttl_s);

/* A token count as a scope (0 is off); -1 unless 0 <= n < POLICY_SCOPE_MAX_TOKENS. */
int policy_scope_tokens(long long n, cache_scope *out);

/* Keep the blocks of the first `end` prompt positions at least ttl_s
 * seconds after their last use. */
typedef struct cache_mark {
    int end;
    double ttl_s;
} cache_mark;

/* A client breakpoint: keep the prefix through the first n_messages
 * messages at least ttl_s after its use. */
typedef struct policy_break {
    size_t n_messages;
    double ttl_s;
} policy_break;

/* OpenAI prompt_cache_key: a client that names its conversation asks to
 * keep it; its prefix up to the newest message is kept like an anchor. */
policy_break policy_key_break(size_t n_messages);

/* The retention marks of one prompt, into marks (at most
 * POLICY_MAX_MARKS; returns how many): the anchor (its leading system
 * messages, with the tools, POLICY_ANCHOR_TTL_S) when it has either, then
 * each breakpoint. msg_bounds[k], k = 0..n_msgs, is the prompt position
 * where the first k messages end (-1: unknown, no mark); system[i] says
 * message i is a system message. A mark never ends at position 0. */
int policy_prompt_marks(const int *msg_bounds, size_t n_msgs, const unsigned char *system, int has_tools,
                        const policy_break *breaks, int n_breaks, cache_mark *marks);

/* The expiry of a block in the shared tier (Redis), in ms from its last
 * use (0: none): a tier shared by replicas must not fill with one-off
 * prompts, so every block there expires dflt_s after its last use (0:
 * never; Redis's maxmemory policy alone evicts); a retention mark
 * (anchor, cache_control, prompt_cache_key; mark_ttl_s, 0 for none)
 * only lengthens that, never shortens it, so an anchor gets the longest
 * of the anchor's and the default's. Refreshed on every use. */
long long policy_shared_ttl_ms(double mark_ttl_s, double dflt_s);

/* A hit count that halves every POLICY_HIT_HALF_LIFE_S, seen age_s later. */
double policy_decay(double hits, double age_s);

/* The one recompute cost model: attention's multiply-adds per earlier
 * position (scores and values, every head and layer) over the weights'
 * multiply-adds per token, so a deep block is worth more than a shallow
 * one of the same size (policy_value's attn_per_pos). */
double policy_attn_cost_per_pos(int n_layer, int n_embd, int n_head, int n_head_kv, int head_dim, int n_ff);

/* The eviction value of an idle block (lower goes first): the compute a
 * hit saves, per byte, times (1 + decayed hits), discounted by the time
 * since its last use. Recomputing a block at depth d tokens costs its
 * weights' work plus attention over d earlier positions, so deeper blocks
 * are worth more per byte; attn_per_pos is attention's cost per earlier
 * position relative to the weights' cost per token (model-dependent). */
double policy_value(int depth_tokens, int n_tokens, double attn_per_pos, double hits, double age_s);

/* Orders two idle blocks for eviction: < 0 when a should go before b.
 * keep_until_* are retention ends on the same clock as now (seconds). */
int policy_evict_before(double value_a, double keep_until_a, double value_b, double keep_until_b, double now);
/* The same order as one number (lower goes first), for a tier that keeps
 * its candidates in a heap: a retained block ranks after every unretained
 * one, earliest expiry first. Every tier orders its blocks by this. */
double policy_evict_key(double value, double keep_until, double now);

/* The learned stable boundary (scope auto:N): remembers recent prompts and
 * answers the longest prefix a prompt shares with one of the last n of
 * them, cut down to the last message boundary at or before it. */
typedef struct policy_recent policy_recent;
policy_recent *policy_recent_new(int cap);
void policy_recent_free(policy_recent *r);
/* bounds: ascending prompt positions where messages start (may be NULL:
 * no cut). Then remembers the prompt itself. */
int policy_auto_boundary(policy_recent *r, const int32_t *prompt, int n, int n_look, const int *bounds,
                         int n_bounds);
/* Positions of a prompt that a request of scope sc may publish (INT_MAX:
 * all); an auto scope asks policy_auto_boundary, and so remembers the
 * prompt. dflt stands in for SCOPE_DEFAULT. */
int policy_publish_limit(policy_recent *r, const cache_scope *sc, const cache_scope *dflt, const int32_t *prompt,
                         int n, const int *bounds, int n_bounds);

/* Recurrent-state snapshots (snapshot.h): where a prompt's state is worth
 * keeping. The smallest position > pos, and <= min(n_prompt, limit), among
 * every `every` blocks of B tokens (0: none), the message starts (bounds:
 * the learned auto:N boundary is cut at one), the end of each retention
 * mark (anchor, cache_control), the publish limit (the auto boundary
 * itself) and the prompt's end; -1 when none is left. The request's end
 * (prompt and generated tokens, so turn N+1 resumes at turn N's end) is
 * the scheduler's to add. A state costs MiBs (19 MiB at 0.8B) and saves
 * only the tokens since the one before, so a position less than min_gap
 * after pos (the last snapshot, or where the request resumed) is skipped,
 * except the end: a system prompt's end, the next message's start and
 * the anchor's end, a few tokens apart, make one snapshot, not three.
 * The store passes one block (B tokens). */
#define POLICY_SNAP_EVERY_BLOCKS 32 /* default --cache-snapshot-blocks */
#define POLICY_SNAP_MB 512          /* default memory budget for snapshots (--cache-snapshot-mb) */
int policy_snap_next(int pos, int n_prompt, int limit, int every, int B, const int *bounds, int n_bounds,
                     const cache_mark *marks, int n_marks, int min_gap);

#endif
