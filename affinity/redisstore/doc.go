// Package redisstore shares session bindings between gateway replicas on Redis (or any
// server speaking its protocol): an [affinity.Store] for [affinity.WithStore]. It is a
// nested module so that the core keeps its single dependency.
//
// It is not a cache of requests or a rate limiter: it holds one small string per
// (session, tier) — the backend ID — and nothing else.
//
// # Usage
//
//	st, err := redisstore.New(redisstore.Config{Address: "redis:6379", PasswordEnv: "REDIS_PASSWORD"})
//	...
//	defer st.Close() // after the Scheduler's last call
//	sched, err := affinity.New(cfg, append(st.SchedulerOptions(), affinity.WithRecorder(rec))...)
//
// # What the fleet guarantees
//
// Each replica's own affinity table stays in front of Redis as the near-cache; Redis is
// the arbiter whenever replicas could disagree.
//
//   - First turns: a local miss computes the HRW winner and runs one script (claim:
//     GET, then PEXPIRE or SET PX). Two replicas racing on a new session: one creates the
//     binding (a miss), the other adopts it (a hit). One miss in total, one backend.
//   - Later turns on another replica: a local miss there adopts the shared binding (one
//     round trip, counted as a hit: it is the backend that served the previous turn).
//     Local hits make no round trip.
//   - Rebinds are compare-and-set (a script: GET, compare with the old backend, SET PX,
//     PUBLISH): a shared binding whose backend is Down in this replica's health view or
//     missing from its candidates is moved to this replica's HRW winner only if no other
//     replica moved it first; otherwise the other replica's choice is adopted. Two
//     replicas never bind one session to two backends.
//   - Scheduler.ForgetIf is a compare-and-delete ([Store.ForgetIf], a script: GET,
//     compare with the backend, DEL, PUBLISH): it never deletes a binding that another
//     replica moved meanwhile.
//   - Dropping a backend never scans Redis: OnBackendDown drops the local bindings
//     (counted broken{down} as without a store) and leaves Redis alone; a shared binding
//     to a backend that is Down in a replica's view is rebound lazily, by compare-and-set,
//     on that session's next turn at that replica. A replica that still sees the backend
//     up keeps serving it until the replica that saw it fail moves the session.
//   - Invalidation: every rebind and forget publishes "<session hash><tier hash>=<backend>"
//     on the channel <prefix>invalidate; each replica drops its local copy unless it is
//     already bound to that backend. The delay is measured by BenchmarkInvalidationDelay
//     (docs/fleet.md, "Measured"); [Store.Sync] waits for it. Messages published while a
//     replica's subscription is down are lost; see the resync below.
//   - Sliding TTL in Redis: a binding's key lives TTL + TTL/8 after its last refresh. A
//     hit refreshes it only when it crosses a TTL/8 period boundary of its session
//     (periods offset per session), so at most once per TTL/8 per session and replica,
//     asynchronously: the refresh is queued and sent in pipelines of up to 256 by a
//     background goroutine. A refresh that finds another backend drops the local copy; one
//     that finds no key re-creates it (a restarted Redis is refilled by the traffic).
//     The key thus expires between TTL and TTL × 1.125 after the session's last turn,
//     and the Scheduler's own expiry and LRU eviction (max_bindings) are local: a later
//     turn adopts the key while it lives, as a hit on the same backend.
//   - Limit: replicas whose candidate lists differ for good (one has a backend the
//     other lacks, and the reverse) each move a session bound outside their own list,
//     so a session whose turns alternate between them moves on every turn. Keep the
//     lists identical; during a rolling change the window is the rollout.
//
// # What is stored
//
// Keys: <prefix>{<16 hex digits: xxh3 of the session ID>}:<16 hex digits: xxh3 of the
// tier>, for example "sessionaffinity:{a171103fd7ab6328}:2d06800538d394c2" (session "sess-1", default tier). The braces are a
// Redis Cluster hash tag: all tiers of a session share a slot. Values: the backend ID.
// A value read back is trusted only as far as it names one of the Scheduler's candidates:
// one that names none (a backend gone, or no backend ID at all, e.g. empty) is never
// stored in a replica's table; a miss moves the key to the HRW winner by compare-and-set,
// and a refresh that finds it drops the replica's local copy. A key that holds no binding
// record at all — a value of another type (a hash, a list, written under the prefix by
// another program) or a string over [MaxRecordBytes] (affinity.MaxBackendIDBytes) — is a
// problem of that key, not of Redis: every script checks the key's type and length first
// (STRLEN, O(1), reading no value) and treats it as absent, so the claim or rebind that
// finds it overwrites it with its binding, a refresh re-creates its own, and ForgetIf
// deletes it, in the same atomic call, which succeeds: the Scheduler keeps using Redis
// for every other session. Each repair is counted ([Store.Repairs], and as a store error
// of its op) and logged once at WARN ("redisstore: key repaired: ...", naming the op, the
// Redis key and what it held). Before, such a key failed the call (WRONGTYPE, or a 10 MB
// reply past the timeout), marked Redis unavailable for retry_after_seconds and was never
// repaired.
// Session IDs, tiers and request data are never sent to Redis; the hash is the
// documented, unseeded hrw.KeyHash, so operators can find a session's key.
//
// # When Redis is slow or down
//
// A request never fails because of Redis. Every call on the request path is bounded by
// timeout_seconds (default 50 ms); on an error or timeout the Scheduler decides from its
// local table (as without a store), counts agentserve_affinity_store_errors_total{op},
// and leaves the store alone for retry_after_seconds (default 1 s), so that a dead Redis
// costs one timeout per replica per second, not one per request. go-redis reconnects by
// itself, and the subscription is re-established. While Redis is away each replica
// keeps its own bindings, and the ones it makes meanwhile are provisional: a session's
// first turn on that replica once Redis answers again confirms its binding with one
// Claim before it is served (kept, or the fleet's binding adopted, or a shared binding
// to a backend unusable here moved to ours; see affinity.Store), so two replicas that
// bound one session apart during the error agree from its next turn. When Redis returns
// (even empty) the refreshes of hits re-create the bindings made before the outage, and
// where two replicas disagree about such a binding (a session claimed anew elsewhere
// after Redis lost its data) the first refresh wins and the other replica adopts its
// value on the session's next turn. A replica whose calls failed during the outage sends
// that refresh on each binding's first hit after it (affinity.Store: one extra queued
// refresh per live binding per outage), so it converges one turn later.
//
// A replica that made no call during the outage (all its turns local hits) sees it
// through its subscription, whose receive fails when Redis goes (or when only that
// connection drops: a network blip, CLIENT KILL); invalidations published until it is
// back are lost. The Store implements [affinity.StoreWatchResync]: when Redis confirms
// the new SUBSCRIBE after such a failure (invalidations flow again), it tells the
// Scheduler, which then refreshes each binding on its first hit, as after a failed call
// of its own: a session another replica moved or claimed meanwhile is dropped locally
// and its next turn adopts the fleet's backend, and a binding the restarted Redis lost is
// re-created. It logs one INFO line per re-establishment with [WithLogger]
// ("redisstore: invalidations resumed: ..."), counted by [Store.Resyncs]; each one follows
// a failed receive and the subscriber's wait of retry_after_seconds, so a flapping
// connection logs at most one line per retry_after_seconds, as the availability log
// logs each real change. Still waiting for a binding's next refresh period (TTL/8) of
// traffic: a loss the subscription does not see (keys evicted under maxmemory or flushed
// while it stays connected, a message lost between Redis Cluster nodes).
//
// The refreshes a resync or an outage leads to come one per live binding's first hit,
// so at most at the replica's request rate, through the queue of 8,192 refreshes that
// the worker sends in pipelines of 256; a refresh that finds the queue full is dropped
// (the binding waits for its next period) and counted as a refresh error. Measured on a
// 2-core VM with a local redis-server 7.0: the worker sends about 100,000 refreshes/s
// (BenchmarkRefreshDrain); after a resync of 50,000 live bindings hit at 2,000 requests/s
// the queue held at most 33 refreshes (305 at 100,000 hits/s), and none was dropped.
// Only hits far faster than the worker (50,000 in 10 ms, a synthetic loop) overflowed it.
// So the queue is not resized and a drop still counts as an error: it means the worker
// cannot keep up with Redis, which is worth an alert whatever caused the burst.
//
// Check at startup with [Store.Ping] (bounded by dial_timeout_seconds): a server that
// refuses the credentials or the database number gives an error wrapping [ErrRejected]
// (a configuration error, which does not heal); an unreachable one gives the connection
// error and the Store keeps retrying. With [WithLogger] a Store logs each change of
// availability once: a WARN when calls start failing, an INFO once they are answered
// again (two in a row, so that a restart does not log INFO, WARN, INFO within
// milliseconds), and apart from them a WARN when the subscription fails (at startup
// too when Redis refuses the SUBSCRIBE: a user denied it) and an INFO when it is back;
// each failed call is counted, not logged. go-redis itself logs (dial failures, several
// a second during an outage) through one process-wide logger, to stderr by default; a
// command can route it to slog with redis.SetLogger([PrintfLogger]{...}). The Store
// never sets it.
//
// # Decisions where the contract is silent
//
//   - go-redis v9, not rueidis: the near-cache that server-assisted client-side caching
//     would give is already the affinity table (0 allocations, no round trip, and it
//     holds backend IDs that Lookup and OnBackendDown need locally), so rueidis's tracking
//     cache would be a second copy; what remains are single-key scripts, pipelines and
//     one pub/sub channel, which go-redis covers with the wider user base.
//   - Counting: a shared binding adopted by a local miss is a hit; the call that creates
//     or moves a shared binding is the miss. Across the fleet hits + misses = successful
//     calls, and misses = first turns + moves. A move found by compare-and-set counts
//     broken{unhealthy} or broken{not_candidate} on the replica that made it.
//   - Without the store (errors, retry interval) decisions are local and may diverge for
//     sessions whose replicas see different health or load; such a binding is confirmed
//     on its next turn after the error, as described above.
//   - One Store serves one Scheduler at a time: each affinity.New with its options
//     registers the new Scheduler's invalidation and resync callbacks in place of the
//     previous ones.
//   - The first subscription (started by [New], in the background) is no resync when it
//     succeeds at once; one that comes up only after failed receives (Redis down at
//     startup) is one: the Scheduler's claims may have reached Redis before the
//     subscriber's next attempt (it waits retry_after_seconds between them), so
//     invalidations may have been missed even then.
//
// # Concurrency and goroutines
//
// All methods are safe for concurrent use. New starts two goroutines (subscriber,
// refresh worker); Close stops them (it may wait up to dial_timeout_seconds for a
// call in flight on a hung server). No globals, no init.
package redisstore
