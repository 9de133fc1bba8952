// Package affinity pins each agent session to one LLM inference backend so that the
// backend's prefix (KV) cache is reused on every later turn. It holds the TTL
// sticky-binding [Table] and the [Scheduler] that composes it with rendezvous hashing
// (package hrw), backend health (package health) and metrics (package metrics).
//
// It is not a proxy, a health checker or a metrics exporter: the caller forwards the
// request, runs (or wires) the checker, and picks a metrics.Recorder.
//
// # Usage
//
//	backends := []affinity.Backend{ // build once, reuse for every call
//		affinity.MustBackend("vllm-0", "http://10.0.0.10:8000", 1),
//		affinity.MustBackend("vllm-1", "http://10.0.0.11:8000", 1),
//	}
//	sched, err := affinity.New(cfg, affinity.WithRecorder(counters))
//	...
//	b, hit, err := sched.SelectBackend(sessionID, tier, backends) // per request
//	// health: sched.OnBackendDown(id) / OnBackendUp(id) (observations), or
//	// sched.Observe as a health.Prober reporter; operators: sched.OnBackendDraining(id)
//	// / sched.Undrain(id); optionally sched.Sweep() every minute (see below).
//
// # Contract
//
// SelectBackend(sessionID, tier, candidates) returns the backend for this turn and
// affinityHit = true exactly when it is the backend that served the session's previous
// turn through a still-valid binding.
//
//  1. Bindings are keyed by (tier, sessionID): one binding per session per tier.
//  2. Hit: a binding exists, now < lastUse + TTL, its backend is among candidates (by ID)
//     and not Down → the caller's candidate value is returned with true, and lastUse = now
//     (sliding TTL). A Draining backend keeps its sessions.
//  3. Miss: otherwise the HRW winner over the eligible candidates (Healthy ones; Draining
//     ones only when no candidate is Healthy; never Down) is bound and returned with false.
//  4. Broken: a binding still within its TTL that cannot be honoured is counted once as
//     broken{tier, reason} and the call proceeds as a miss. Reasons: down — removed by
//     [Scheduler.OnBackendDown]; unhealthy — found by SelectBackend with its backend still
//     among the candidates but Down in the health set (marked there directly, e.g. by a
//     shared checker); not_candidate — found with its backend missing from the candidates
//     (checked first). OnBackendDown marks the ID Down, deletes all its bindings in
//     O(bindings on it + shards) and counts them then; repeated or unknown IDs remove
//     nothing (unknown IDs are still marked Down, so new sessions avoid them).
//  5. No failback: OnBackendUp only records the backend as observed up; bindings never
//     move back. A valid binding is not moved by scale-up, other backends' flapping or
//     candidate order.
//  6. TTL: default 1800 s; 0 disables affinity (every call a miss returning the HRW winner,
//     nothing stored). Expired when now >= lastUse + TTL. Only a hit extends a binding;
//     [Scheduler.Lookup] never does. A JSON/YAML config without the key gets 1800, with 0
//     gets 0; negative or overflowing values fail [New] with ErrInvalidConfig.
//  7. Errors are sentinels (see the Err variables); a call that fails stores and counts
//     nothing: the winner is computed before anything changes. Duplicate IDs among the
//     candidates collapse to the first (its weight and value count).
//  8. Determinism: placement is hrw over the candidate IDs keyed by the session ID alone
//     (the tier is not hashed), with the documented hash of package hrw, no seed, ties to
//     the smallest ID; every process and version agrees, whatever the candidate order.
//  9. Concurrency: all methods are safe for concurrent use. Concurrent first turns of one
//     session produce one binding and one miss; the others find that binding and are
//     counted as hits (so hits + misses = successful calls), all with the same backend.
//  10. Memory is bounded by Config.MaxBindings (default 1,048,576); at the cap the LRU
//     binding of the shard is evicted and counted. No goroutine runs in the background.
//  11. Metrics carry the tier only, never a session or backend ID.
//  12. Drain is operator intent, health is observation (the health.Set keeps both): the
//     effective state is Down if the backend is observed down, else Draining if drained,
//     else Healthy. OnBackendDown, OnBackendUp, [Scheduler.Observe] and OnHealthChange's
//     Healthy/Down record observations and never end a drain; OnBackendDraining drains and
//     only [Scheduler.Undrain] ends the drain. A drained backend that fails and then passes
//     its health checks is Draining again and takes no new sessions.
//
// # Load awareness (Acquire and leases)
//
// [Scheduler.Acquire](sessionID, tier, candidates, cost, &lease) makes the routing
// decision and leases the request into a [Lease] the caller owns: the chosen backend's
// outstanding load (in-flight requests and their cost) grows until [Lease.Done], as with
// grpc-go's balancer.PickResult.Done. [Scheduler.LeaseBackend](backend, cost, &lease)
// leases a request the caller routes itself (a retry sent to another backend while the
// binding stays): the same load accounting, no decision. The rules add to the contract
// above:
//
//  13. SelectBackend is unchanged and does no load accounting. With Config.Load absent
//     (balance_factor 0) Acquire decides exactly as SelectBackend: the same backend, hit
//     flag, counters and bindings.
//  14. Load is outstanding prefill work in prompt tokens: the sum of the charges of the
//     backend's open leases, plus queued_request_cost (default 1024) for each request the
//     backend reported through [Scheduler.ReportLoad] (waiting + running) beyond the
//     leases open here when it reported (other replicas' requests, say). A lease is
//     charged its cost (0 counts as 1, so callers without an estimate get request
//     counting; above MaxLeaseCost, 2^24 tokens, as MaxLeaseCost),
//     except a hit with load awareness on, which is charged cost - reprefill (at least
//     1; reprefill as in rule 17): a warm backend prefills only the part of the prompt
//     beyond the cached prefix. Per backend it is
//     kept in atomics; nothing is kept per session beyond the binding (which holds the
//     last reported prompt size and a lost-cache flag). Decodes are not counted: a warm
//     hit costs 1 token (docs/load-aware.md, "What the load counts"), unless rule 14e's
//     floor is set.
//     14a. Drain model (opt-in: load.drain_tokens_per_second > 0). Each backend's charged
//     work drains with time: a lease adds perRequest + charge x perToken of engine time
//     to the backend's horizon, which starts from max(horizon, now) (a work-conserving
//     FIFO server's virtual finish time); the load is then the horizon's distance from
//     now in prompt tokens (time / perToken), at most the open leases' charges plus their
//     per-request time. So a request whose prefill the backend has had the time to do
//     stops counting while its answer still streams. Every Lease.Done re-anchors the
//     horizon to now + the work of the leases still open (0 when none is). Rule 17's wait
//     reads the same horizon at most at the charges: the per-request time (decoding) may
//     hold it up, not lift it above them (a request decoding in a batch slot holds back
//     no new prefill).
//     14b. Service model: perRequest (time.Duration; decoding and overhead of an average
//     request) and perToken (engine time per uncached prompt token) are a least-squares
//     fit of each request's service time — its Done time minus the later of its Acquire
//     time and the backend's previous Done — on its uncached prompt tokens (prompt -
//     cached when both were reported, else its charge), over samples weighted by
//     drain_ewma_weight (default 0.05) per request. Before a backend's first Done, perToken is
//     1 / drain_tokens_per_second and perRequest 0. [Scheduler.Drain] reports both.
//     14c. Cache retention: with the drain model a hit is charged cost - reprefill only if
//     its binding was idle (time since its previous turn) for less than its backend's
//     learned retention, and its whole cost otherwise. The retention is a threshold
//     learned from the cached tokens hits report: an eviction (cached < half of
//     reprefill) after an idle time below it lowers it, a survival after an idle time
//     above it raises it, by drain_ewma_weight of the distance; the first eviction sets
//     it; a hit whose cached count was not reported (rule 17) teaches it nothing, nor
//     does one whose binding has no reported prompt size (its prefix is then a guess
//     from the cost: a longer new turn would look like an eviction). With
//     retention_guard_factor f (>= 1; 0 = off) a binding idle for at least f x the
//     retention counts as evicted in rule 17 (reprefill 0), as a lost cache does.
//     14d. Prefix survival: past the retention a prefix may still be cached (with large
//     caches most are, 1-2 retentions on; with small ones few). Each backend keeps the
//     survival rate of its hits idle past the retention in bins of idle time / retention
//     ([1, 1.5), [1.5, 2), [2, 2.5), [2.5, 3), [3, 4), [4, inf)): an exponentially
//     weighted mean (weight drain_ewma_weight) of 1 per hit that found at least half its
//     reprefill cached, 0 per eviction. In rule 17 a binding idle past the retention (and
//     below f x the retention) has reprefill x the survival rate of its bin, in prompt
//     tokens. Each rate starts at 1, so an untaught backend guards as the step of rule
//     14c does, and moves by drain_ewma_weight per hit: unlike the retention, which
//     the first eviction sets, one eviction takes a rate from 1 to 0.95 (the default
//     weight), not to 0. Below the retention the prefix is expected cached in full.
//     Everything the drain model keeps is per backend (a few atomics and a mutex taken
//     by Done); it is deterministic for a given sequence of calls and clock readings.
//     14e. Request floor (opt-in: load.min_request_cost m > 0). A backend with n open
//     leases has a load of at least n x m prompt tokens before the reported requests are
//     added: max(the charges of rule 14, or the undrained work of rule 14a, n x m) +
//     queued_request_cost x the requests reported beyond the leases. A request in flight
//     holds a running slot (or a place in the queue) however much of its prompt was
//     cached, so with the floor a backend queueing many cached decodes no longer looks
//     idle. It is a maximum, not an addition: the drain model's per-request time and the
//     leases' charges are not counted twice, and the reported requests beyond the leases
//     exclude the leases. The charges themselves ([Scheduler.Load], what Done releases
//     and the drain model learns from) and the request being placed (it counts its
//     cost in the bound of rule 15) are unchanged. The floor counts in the load of rules
//     15, 16 and 18 (the bound, placement, whether a backend is over the bound or a
//     spill target under it, a cold binding's placement) and [Scheduler.LoadView]; it
//     does not count in rule 17's wait, which is the load without the floor: a request
//     in flight whose prefill is cached or drained holds a slot, but delays a new
//     prefill far less than queued prefill does, so the prefix a move throws away is
//     weighed against queued prefill only.
//  15. Bound: with n eligible candidates (Healthy; Draining only if none is Healthy; each
//     ID once) of total load L, a backend is under its bound when it is idle (load 0) or
//     when load + cost <= balance_factor x (L + cost) / n — x w / W instead of / n when
//     the eligible weights differ (w its weight, W their sum: its weighted share, as in
//     Envoy's bounded-load hashing; docs/load-aware.md) — the consistent hashing with
//     bounded loads of Mirrokni, Thorup and Zadimoghaddam (SODA 2018), as in Envoy's and
//     HAProxy's hash_balance_factor. Equal weights keep the unweighted expression exactly.
//  16. Placement (a miss or rebind): the first backend of the session's HRW ranking over
//     the eligible candidates that is under its bound (rule 8's order: score, then ID);
//     when none is, the least loaded (load / w when the eligible weights differ; ties in
//     ranking order). With no load anywhere this is the HRW winner, as for SelectBackend.
//  17. Spill: a hit whose backend is over its bound moves to the first backend ranked
//     after it in the session's ranking that is under its own, only when wait(bound) -
//     wait(target) > spill_cost_weight x reprefill, where wait is the load of rule 14
//     without rule 14e's floor and rule 14a's per-request time (prompt tokens of queued
//     prefill, before this request; with the drain model at most the open leases'
//     charges; raw, not per weight: it is the work this request would queue behind; a hit whose
//     backend's wait is at most spill_cost_weight x reprefill stays without looking at
//     the other candidates) and reprefill the prefix the move throws
//     away: 0 when the binding's last hit reported cached / prompt tokens <=
//     cold_cache_ratio (the backend evicted it), else min(last reported prompt tokens,
//     cost), else cost (with the drain model, as rules 14c and 14d scale it). An
//     unreported cached count (DoneInfo.CacheReported false, CachedPromptTokens 0) is
//     unknown, never a loss: that binding keeps its prompt size, not cold. The move is
//     a rebind: AffinityHit false, Outcome spill, counted once as
//     broken{reason="overloaded"} and as a miss, logged at Debug; the new binding sticks
//     like any other.
//  18. Hysteresis: a spill only moves down the session's own ranking, never back up, so
//     a session cannot ping-pong between two backends whose load oscillates; it moves at
//     most n-1 times while its binding lives, and replicas (which rank alike) choose the
//     same target; for a session on its HRW winner that is also its failover target.
//     One exception, for a binding with nothing left to lose: when its reprefill is 0
//     (its last hit reported the prefix lost — a missing count never does — or it
//     idled f x the retention) and its backend is busy (load > 0), it is placed as a
//     new session would be (rule 16, over its whole ranking) and moves there — a spill,
//     counted as above — when that is another backend with less load than its own;
//     otherwise it stays. Such a move can go
//     up the ranking, but only after a cache loss: the moved binding is warm (the move's
//     turn is not a hit), so it moves again only after its prefix is lost again, never
//     on load alone.
//  19. Determinism: for a given load view (the loads read at decision time) placement and
//     spill are pure functions of session, candidates, health and loads. Replicas that
//     see similar load agree; concurrent Acquires read the loads before either adds its
//     own, so a burst can overshoot the bound by the burst's size.
//  20. Lease.Done is idempotent and safe from any goroutine on the same *Lease (calls
//     may be concurrent), also after OnBackendDown, and allocation-free. A Lease is
//     shared by pointer, never copied once filled (go vet's copylocks check reports
//     copies: a copy would release the load twice; a release that would take the
//     backend's load below zero is undone, so it never reads negative or full); Acquire refuses to fill a Lease
//     still open (ErrInvalidLease) and fills one whose Done has returned. Usage it reports (prompt and cached
//     prompt tokens) on an affinity hit feeds the tier's achieved reuse
//     ([Scheduler.Reuse], metrics.UsageRecorder when the Recorder implements it) when
//     both were reported (an unreported cached count is left out, not 0 % reuse).
//  21. Parent placement: [Scheduler.SelectBackendWithParent] takes a parent
//     session ID as a hint. It changes only rule 3, and only for a turn without a valid
//     binding of its own: if the parent has a valid binding in the same tier whose
//     backend is a candidate and eligible (as in rule 3), that backend is bound instead of
//     the HRW winner, returned with [PlacedParent], counted as a miss and as
//     Stats.ParentPlaced (metrics.ParentRecorder). Otherwise the call is SelectBackend.
//     The parent's binding is only read (its TTL does not slide); the child's binding is
//     its own from then on (a broken child binding is rebound by HRW, not by the hint).
//     [Scheduler.AcquireWithParent] is the same hint for leases (charged the whole cost,
//     as a miss). With load awareness on and spilling allowed (not disable_spill), the
//     parent's backend must first pass the guard a hit on it would face, the prefix the
//     child shares being the parent binding's reprefill (rule 17 with the child's cost;
//     with the drain model as rules 14c and 14d scale it for the parent's idle time):
//     the hint applies when that backend is idle, when its wait is at most
//     spill_cost_weight x that prefix, or when it is under the bound (rule 15, this
//     request counted: a hit under the bound never spills). Otherwise — over the bound
//     and busier than that, or busy at all when the prefix is 0 (the parent's last hit
//     reported its cache lost, or it idled f x the retention) — the hint is declined and
//     the turn is placed as a new session (rule 16, [PlacedHRW]; nothing is counted as
//     parent-placed or broken). So a burst of subagents fills the parent's backend only
//     up to the bound, or to spill_cost_weight x prefix plus one request, and the rest
//     follow the bounded-load walk. Decision: unlike a spill, a decline does not also
//     need a target whose wait is lower by more than spill_cost_weight x prefix — the
//     child has no binding to keep, and that test would let a burst of children exceed
//     the bound by that much. With disable_spill the hint ignores load, as hits do.
//
// Choosing values: balance_factor is HAProxy's hash-balance-factor and Envoy's
// hash_balance_factor divided by 100 (they take percent); lower values balance harder and
// move more new sessions off their HRW winner. spill_cost_weight weighs one re-prefilled
// prompt token against one token of queued prefill. The README's replay table shows the
// measured trade-off; 1.25 and 5 met its goal with 20 % caches at 4, 8 and 16 backends.
// With small caches (5 % of the working set) the lease-sum view misses it; adding
// cold_cache_ratio 0.001, drain_tokens_per_second 16000 and retention_guard_factor 2.5
// (the example gateway's configuration) meets it in all six rows, with rules 14d and
// 18's placement of cold bindings (README). The drain rate only seeds the model: it is
// learned from the first Done on. The example gateway also sets min_request_cost 4096
// (rule 14e: near or above a typical prompt the bound counts requests in flight); the
// library leaves it 0, as the right value depends on the prompt sizes.
//
// # Shared store (WithStore)
//
//  22. Shared store (optional, [WithStore]): the table becomes the near-cache of a
//     [Store] shared by gateway replicas (package affinity/redisstore). A local hit makes
//     no store call except a queued refresh at most once per TTL/8 per session; a local
//     miss makes one (Claim: bind the HRW winner, or adopt the fleet's binding as a hit)
//     and, when the shared binding is broken in this replica's view, a second (Rebind, a
//     compare-and-set). Concurrent first turns on several replicas make one miss in
//     total; a rebind is seen by the other replicas through Store.Watch. Forget also
//     deletes the shared binding; ForgetIf does when its local binding matched, with the
//     store's compare-and-delete ([StoreForgetIf]) if it has one, and also when this
//     replica holds no valid binding of the key (evicted, expired, never seen), then only
//     with a compare-and-delete. A store error or timeout (default 50 ms) never fails a
//     call: it is decided locally, counted ([Scheduler.StoreErrors],
//     metrics.StoreRecorder), and the store is skipped for the retry interval. A binding
//     decided so, without the store's answer (a miss, rebind or spill while the store is
//     skipped or failing; also a parent placement, which never asks it), is
//     provisional: the first hit on it once the store is usable again asks the store
//     before answering (the one other store call of a hit: one Claim with the local
//     backend, bounded by the store timeout): claimed or already bound there, it is kept;
//     bound to another usable candidate (Draining included, as for any hit), the fleet's
//     binding replaces it (a hit); bound to a backend Down or not a candidate here, that
//     binding is moved to the local one by Rebind (counted broken, as a miss's move is);
//     an error leaves it provisional and answers the hit locally. So replicas that
//     decided a session apart during a store error agree from its next turn after the
//     error. Without a store nothing of this runs (no binding is ever provisional).
//     Acquire consults the store as SelectBackend does, and a spill (rule 17) is a
//     compare-and-set in the store: if another replica moved the session first, its
//     choice is adopted. A binding's first hit after a retry interval refreshes it at
//     once (queued), and so does its first hit after a store that implements
//     [StoreWatchResync] reports its invalidation feed re-established after a loss
//     (Redis restarted, a subscription dropped): a move whose invalidation was lost, or
//     a binding the store lost, is then found (next turn: the fleet's binding) or
//     re-created. Other lost invalidations wait for the binding's next TTL/8 refresh.
//
// # Decisions where the contract is silent
//
//   - An expired binding is not broken: its session's next call is a plain miss, and the
//     binding is counted in [Stats].Expired when reclaimed.
//   - The bind/drop race: SelectBackend computes the winner outside the shard lock, then
//     re-reads the winner's health under the lock that inserts the binding, and starts
//     over if it changed. OnBackendDown marks Down first and then locks each shard in
//     turn, so either it finds the new binding or the insert sees Down. A select that
//     meets a binding to a Down backend while OnBackendDown is still on its way to that
//     shard counts it as unhealthy instead of down — still exactly once.
//   - When every candidate is Down, SelectBackend fails with ErrNoEligibleBackend and a
//     binding to a Down backend is left in place (uncounted) until a later call can
//     rebind it or OnBackendDown removes it.
//   - The health set is read, never subscribed to: a backend marked Down directly in a
//     shared set gets no new sessions at once, its bindings break lazily as unhealthy.
//     Wire the checker to [Scheduler.OnHealthChange] to drop them eagerly.
//   - The methods that existed before drains were kept apart map as follows: OnBackendDown
//     = observe down (and drop bindings), OnBackendUp = observe up, OnBackendDraining =
//     drain; health.Set.MarkDown/MarkUp/MarkDraining likewise, and health.Set.Set forces
//     an effective state (Healthy also undrains). OnHealthChange treats a From Draining ->
//     To Healthy transition as an explicit undrain of the source set (a health.Set makes
//     that transition only on Undrain), every other To Healthy as an observation.
//   - There is no separate "maintenance" state: to take a backend out entirely, drop it
//     from the candidates (its bindings break as not_candidate) or report it down; to let
//     its sessions finish, drain it.
//   - A replacing health checker converges the set when wired as a reporter
//     (health.WithReporter(sched.Observe)): its first verdict on each backend is reported
//     — one success at once, a failure after its failure threshold — so a backend an old
//     checker held Down comes back; call sched.Health().Retain(configured IDs) to forget
//     backends no longer configured (their drains included).
//   - Per-tier TTLs (Config.Tiers) are supported; a tier with TTL 0 stores nothing. The
//     default tier "" is not a Tiers key (ErrInvalidConfig): its TTL is
//     StickyTTLSeconds, so one place sets it.
//   - The cap is split evenly over the shards (the shard caps sum to MaxBindings) and
//     LRU order is exact within a shard, approximate across shards.
//   - [Scheduler.Forget], [Scheduler.ForgetIf] and Table.Delete count nothing; Recorder.Evicted is called for
//     cap evictions only, not for expiry.
//   - Logging (WithLogger, log/slog): Debug for each broken binding SelectBackend rebinds
//     (tier, reason, old and new backend ID; never the session ID) and for each
//     provisional binding replaced by the fleet's (tier, old and new ID), Info for each
//     OnBackendDown that removed bindings (backend ID and count; its broken bindings are
//     not logged one by one). Nothing else per hit or per miss.
//   - Error messages quote at most 32 bytes of a session ID or tier.
//   - Snapshots ([Scheduler.Snapshot], [Scheduler.Restore]): a versioned binary format
//     ("SAFSNAP1", CRC-32C) of the valid bindings with their remaining TTL. Restore keeps
//     each binding's backend and its remaining TTL minus the time since the snapshot was
//     written (wall clock of the Clock; a stamp after the Clock's now counts as now, so
//     no binding outlives its TTL from the restore), cut to the tier's current TTL; expired ones, a
//     tier now at TTL 0 and session IDs now too long are dropped; a live binding of the
//     same key wins; a damaged or truncated input stores nothing (ErrCorruptSnapshot,
//     ErrSnapshotVersion). The format holds session IDs up to MaxSnapshotSessionIDBytes
//     (64 KiB) and backend IDs up to MaxBackendIDBytes (4 KiB, which NewBackend and
//     Table.Bind enforce, so no binding has a longer one): the writer leaves out a binding
//     over either and counts it
//     (Scheduler.WriteSnapshot's Skipped) rather than write a file the reader rejects
//     whole. Restored into a non-empty table, a binding older than the
//     newest one of its TTL class in its shard takes that one's lastUse (it may live a
//     little longer), so that the LRU lists stay sorted.
//   - Load records are per backend ID and never removed (memory O(backend IDs seen):
//     about 240 bytes of live heap per distinct ID with 10-byte IDs, 23 MB per 100,000,
//     BenchmarkLoadRecordBytes);
//     OnBackendDown does not reset a backend's load: its open leases release it on Done.
//   - A failed request's usage (DoneInfo.Err != nil) is ignored; its load is released.
//   - Per-tier reuse keeps the first 64 tiers apart and folds the rest into "other".
//   - A parent session ID that is empty, equal to the session ID or too long is ignored
//     rather than an error: it comes from a client header, and a bad hint must not fail
//     a request that SelectBackend would serve. Determinism (rule 8) holds given the
//     parent's binding, which every replica sees only if the bindings are shared.
//   - With a store, the store's decision on a local miss supersedes a local binding
//     found meanwhile (it is replaced uncounted), so that concurrent first turns on one
//     replica count one miss, as across replicas. Broken bindings found in the store are
//     counted by the replica whose compare-and-set moves them; OnBackendDown still
//     counts its local drops as down, so a session dropped there and then moved in the
//     store counts once as down and once as unhealthy. The store sees hashes only
//     ([StoreKey]), never session IDs or tiers.
//   - A provisional binding replaced by the fleet's on confirmation is a hit (the fleet's
//     binding is honoured, as when a local miss adopts it) and is logged at Debug
//     ("provisional binding replaced by the fleet's": tier, from, to), not counted as
//     broken: no backend failed, the local copy was a guess made while the store was
//     away, and the store error that made it is already counted. Bindings restored from
//     a snapshot and Table.Bind's are not provisional. A binding this replica confirmed
//     before a store outage is not confirmed again, but its first hit after the store is
//     usable again refreshes it at once (not only at its TTL/8 boundary): an
//     invalidation it missed during the outage, or a store that came back empty and let
//     another replica claim the session elsewhere, is then found and the local copy
//     dropped, so the session's next turn adopts the fleet's binding (one turn later
//     than a provisional binding, whose confirmation is synchronous; one extra queued
//     refresh per live binding per outage). An outage this replica made no call in (all
//     its turns local hits) is seen by the store's invalidation feed instead: a store
//     implementing [StoreWatchResync] reports the feed re-established (redisstore does,
//     once Redis confirms the new subscription), and the Scheduler reacts as to the end
//     of a retry interval, by advancing the same skipUntil time to now (never back: a
//     retry interval under way is kept whole), so the hit path reads nothing new. A hit
//     in the very clock reading of that signal counts as before it (refreshed again on
//     its next hit); only a hit between the signal's clock read and its
//     compare-and-swap may miss its refresh. What still waits for the next refresh (within TTL/8 of traffic): a
//     store without StoreWatchResync, and a loss its feed does not see (keys evicted or
//     flushed while the connection stays up, a message lost between Redis Cluster nodes).
//   - Config typos must not silently disable features: an unknown key anywhere in a
//     JSON config (Config.UnmarshalJSON) is ErrInvalidConfig naming the key, even when the
//     caller's decoder does not call DisallowUnknownFields, as a strict YAML decoder
//     (yaml.v3 KnownFields) rejects it. For the same reason a load key other than
//     balance_factor set while balance_factor is 0 (load awareness off) is ErrInvalidConfig
//     naming both keys: none of them acts on its own (the drain model, cold_cache_ratio
//     and queued_request_cost only feed Acquire's load-aware placement and spill, and
//     [Scheduler.Drain] and [Scheduler.LoadView] only report on it), and
//     drain_ewma_weight and retention_guard_factor likewise need drain_tokens_per_second.
//   - Every numeric load key has a documented range ([LoadConfig], MaxBalanceFactor and
//     its peers); a value outside it is rejected, not clamped. cold_cache_ratio is used at
//     full float64 precision (no rounding to a resolution).
//   - Load arithmetic saturates rather than overflows: ReportLoad accepts any
//     non-negative counts, their sum saturates at math.MaxInt64 and a backend's load view
//     at MaxLoadView (2^46 prompt tokens), so a backend reporting a huge queue looks as
//     busy as possible, never idle; Acquire charges at most MaxLeaseCost per lease; the
//     drain horizon and the usage a Done reports (any prompt or cached size) cannot wrap.
//   - The caller owns a lease's memory (Acquire fills a *Lease) rather than getting a
//     value backed by a pooled record: that saves a pool get and put per request, and
//     a gateway keeps the Lease in its per-request state anyway. The price is that a
//     Lease must not be copied once filled; a gateway that retries gives each attempt its
//     own Lease, so a late Done of a failed attempt cannot release the next one.
//
// # Time
//
// One clock read per SelectBackend. Times are int64 nanoseconds since the clock reading
// taken at construction (monotonic with the system clock). When two calls on one shard
// read the clock in one order and take the lock in the other, the later one stores the
// newer reading of the two as lastUse (a time still within the call), which keeps each
// LRU list sorted by lastUse so that expiry and eviction are exact and O(1) per binding.
// On a virtual machine time.Now costs about 50 ns, comparable to the rest of the hit
// path; [CoarseClock] (a caller-run ticker) makes the read an atomic load at the price of
// up to one tick of extra TTL.
//
// # Reclaiming expired bindings
//
// Expired bindings are invisible at once. They are removed when their session's next
// SelectBackend rebinds the key ([Scheduler.Lookup], Table.Get and Table.Touch only skip
// them), two per TTL-class list from the oldest end of the shard on every insert, at the
// cap before anything is evicted, by OnBackendDown along with the backend's other
// bindings, and all at once by [Scheduler.Sweep] (O(expired +
// shards × distinct TTLs)). Under steady traffic the inserts keep the table clean; call
// Sweep periodically if traffic may stop while memory matters — from your own goroutine:
// there is no hidden one and no Close.
//
// # Costs
//
// A SelectBackend hit: 0 allocs, one hash of the session ID, one clock read, one shard
// lock, an index probe, a check of the candidates and a move to the front of the
// binding's LRU list. A miss: 1 allocation (the stored key) and O(len(candidates)) HRW
// scores. Acquire + Lease.Done: SelectBackend's cost plus three atomic read-modify-writes
// (with load awareness, also the candidates' loads), 0 allocs. OnBackendDown: O(bindings
// on the backend + shards). Memory: about 120 heap bytes per binding with 36-byte session
// IDs, bounded by the cap. Each method's doc gives its cost;
// what each path touches, in detail, is in docs/table-layout.md of the repository, the
// measured figures in docs/benchmarks.md.
//
// # Layout
//
// [Table] has 64 shards (fewer for caps under 1,024), each with a mutex, an
// open-addressing index, a slab of 48-byte entries, an intrusive LRU list per distinct
// TTL and a bindings list per backend; backends are numbered table-wide. The details,
// and what a hit and a miss each touch, are in docs/table-layout.md of the repository.
package affinity
