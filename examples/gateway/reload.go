package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"slices"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

// ErrReloadNeedsRestart: a [Gateway.Reload] changed a setting that cannot change in
// place (`listen`, `admin_listen` and the others [Gateway.Reload] lists). The reload is
// rejected as a whole; the old configuration keeps serving.
var ErrReloadNeedsRestart = errors.New("gateway: config change needs a restart")

// newScheduler builds a Scheduler for ac with the gateway's recorder, logger and
// WithSchedulerOptions; extra options come last.
func (g *Gateway) newScheduler(ac affinity.Config, extra ...affinity.Option) (*affinity.Scheduler, error) {
	opts := append([]affinity.Option{affinity.WithRecorder(g.rec), affinity.WithLogger(g.log)}, g.storeOpts...)
	opts = append(opts, g.opts.schedOpts...)
	s, err := affinity.New(ac, append(opts, extra...)...)
	if err != nil {
		return nil, invalidFrom(ErrAffinityConfig, "affinity", err, affinity.ErrInvalidConfig)
	}
	return s, nil
}

// Reload applies cfg (defaults applied, validated) in place, without dropping a request
// or a binding that can stay:
//
//   - backends, weights, tiers, model_tiers, headers, body cap, retry, drain and
//     snapshot settings take effect for every request that starts after Reload returns;
//     requests in flight finish on the state they started with; the log's
//     weight_changed, tier_changed and url_changed fields list each backend that stays
//     and whose effective weight, tier or URL changed ("id:old->new"; the default pool
//     is "(default)"), nil when none did;
//   - bindings to backends that remain stay where they are (weight changes move no
//     session: they only steer new ones), except after a change of tenant scoping (on,
//     off, tenant.header, tenant.api_key, the secret): it changes every binding key
//     ("t:<tag>:<session>"), so each session is placed again on its next turn (a miss,
//     and a move where HRW picks another backend), logged as one Warn at the reload; the
//     old keys stay until their TTL (a return to the previous scoping finds them);
//   - a removed backend is no longer a candidate, at once (the log's "removed" field
//     lists it; it is not drained in the health sense, and it leaves /readyz and the
//     backend metrics at once): new sessions avoid it, and each of its
//     bindings is broken as not_candidate (and rebound to the HRW winner, outcome
//     rebind) when its session returns, or expires with its TTL; to let its sessions
//     finish there first, set its backends[].drain, wait, then remove it;
//   - backends[].drain is applied to a backend the reload adds and to one whose value
//     changed (true: drained; false again: undrained), and only to those (the log's
//     drained and undrained fields, and a "backend state change" line for each
//     effective change); a reload that only changes drain rebuilds no Scheduler or
//     prober and moves no binding;
//   - an affinity change (sticky TTL, per-tier TTLs, max_bindings, max_session_id_bytes)
//     builds a new Scheduler and copies the bindings over through a binding snapshot
//     (affinity.Scheduler.Snapshot/Restore): each keeps its backend and its remaining TTL,
//     cut to the new TTL; a tier whose TTL becomes 0 loses its bindings; a lower
//     max_bindings keeps the most recently used (each binding is copied once, and each
//     one left out is counted once as an eviction; the log's bindings_copied is how many
//     the new table held after the snapshot copy plus the late bindings stored after it,
//     each of which at the cap evicts an older one, so at the cap it can exceed what the
//     table holds); a request in flight on the old configuration that places its session
//     after the copy stores its binding in the new Scheduler too (a new one unless one is
//     there, a rebind or spill in place of the binding it replaced: schedLife.forward); a
//     reload waits for a binding snapshot being loaded
//     ([Gateway.LoadBindings], the start-up load) and copies what it restored; the new
//     Scheduler's Stats count from the reload on (the Prometheus counters continue),
//     and the outstanding-load gauges keep counting the old one's requests until they
//     end (outstanding.go);
//   - a health change (or a changed backend set or URL while health.enabled) builds a new
//     prober, and [Gateway.Run] restarts its loops with the new intervals; the new prober
//     takes over (health.WithStateFrom) the state, consecutive failure and success counts
//     and next probe time of every backend with the same ID, URL and health.path, so
//     reloads neither restart the counts nor probe those backends at once (added ones
//     are probed at once, up to 16 of them; a larger batch at most 16 per 1/128 of the
//     interval, all within one interval: docs/gateway-health.md); a backend the old prober held Down stays Down and comes back
//     after success_threshold passing probes, as it would have (the log's held_down
//     lists what the new prober holds Down); so is a backend added back
//     with the URL it had when an earlier reload removed it while the active check held
//     it Down (a configuration rolled back; the last 256 such removals are remembered),
//     with a "backend state change" line; every other added backend starts Healthy. A backend the old prober held Down whose URL changed, or every one when
//     health checks are disabled (nothing would lift the mark), is marked up, with a
//     "backend state change" line;
//   - a change of `listen` or `admin_listen`, or of a setting the listener, the http.Server or the backend
//     transport were built with (timeouts.dial_seconds, backend_idle_conn_seconds,
//     read_header_seconds, client_idle_seconds, limits.max_header_bytes,
//     max_connections) or of metrics.exporter, is rejected with [ErrReloadNeedsRestart]
//     (whose message lists every such change; the whole reload is rejected);
//     the other timeouts, limits, outlier_detection, tenant and parent-session settings
//     change in place (a tenant change re-places every session: see above).
//     A change of the `store` block is rejected too (a new Scheduler built by an
//     affinity change shares the same store).
//
// A config that fails validation (or whose binding_snapshot directory does not take a
// file) is rejected (the error wraps [ErrInvalidConfig] and a
// specific sentinel, like [New]'s) and the old configuration keeps serving: nothing
// changes unless Reload returns nil. A valid config equal to the current one (defaults
// applied, and the same tenant secret) changes nothing at all — no Scheduler, prober or
// loop is rebuilt or restarted — and logs "config unchanged" at Info instead of "config
// reloaded" (decision: one line per reload, which says it was seen and that it applied
// nothing; a "config reloaded" with every list empty read as if something had been
// applied). Both lines carry trigger: [TriggerAPI] here ([Gateway.ReloadFileFor] passes
// its own). Safe for concurrent use (reloads are serialized).
// Cost: O(backends x tiers) plus, for an affinity change, O(bindings).
func (g *Gateway) Reload(cfg Config) error { return g.reload(cfg, TriggerAPI) }

// reload is [Gateway.Reload] with the trigger its log lines name; it counts the result
// (reload_metrics.go).
func (g *Gateway) reload(cfg Config, trigger string) error {
	g.reloadMu.Lock() // also orders the counts: the gauge tells the last reload's result
	defer g.reloadMu.Unlock()
	unchanged, err := g.apply(cfg, trigger)
	switch {
	case err != nil:
		g.reloadStats.count(reloadRejected)
	case unchanged:
		g.reloadStats.count(reloadUnchanged)
	default:
		g.reloadStats.count(reloadApplied)
	}
	return err
}

// apply does the work of reload, with g.reloadMu held: unchanged reports a config
// equal to the serving one (nothing applied).
func (g *Gateway) apply(cfg Config, trigger string) (unchanged bool, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	old := g.state()
	// A new path is not loaded by a reload: a file there that cannot be read is refused.
	if err := checkBindingSnapshot(cfg.BindingSnapshot, cfg.BindingSnapshot != old.cfg.BindingSnapshot); err != nil {
		return false, err
	}
	if reflect.DeepEqual(cfg, old.cfg) && !old.tenants.rekeys(newTenants(cfg.Tenant)) {
		g.log.Info("config unchanged; nothing to apply", "trigger", trigger, "backends", len(old.backends))
		return true, nil
	}
	if err := restartOnly(old.cfg, cfg); err != nil {
		return false, err
	}
	rt, err := newRouting(cfg)
	if err != nil {
		return false, err
	}
	rt.keepProgress(old)
	migrate := !reflect.DeepEqual(schedulerConfig(cfg), schedulerConfig(old.cfg))
	rt.sched = old.sched
	if migrate {
		// The new table shares the health set, so Down marks survive.
		if rt.sched, err = g.newScheduler(schedulerConfig(cfg), affinity.WithHealth(old.sched.Health())); err != nil {
			return false, err
		}
	}
	rt.prober = old.prober
	newProber := !sameProbing(old, rt)
	var heldDown []string // backends the old prober held Down that the new one starts Down
	var backDown []string // of those, backends added back that were removed while Down
	if newProber {
		if rt.cfg.healthEnabled() {
			for _, b := range rt.backends {
				switch ob := old.byID[b.id]; {
				case ob == nil && g.gone.has(b.id, b.url.String()):
					heldDown = append(heldDown, b.id)
					backDown = append(backDown, b.id)
				case ob != nil && old.prober != nil && ob.url.String() == b.url.String() && old.prober.State(b.id) == health.Down:
					heldDown = append(heldDown, b.id)
				}
			}
		}
	}

	moved := 0
	var copied bindingSet
	if migrate {
		if moved, copied, err = copyBindings(old.sched, rt.sched); err != nil {
			return false, fmt.Errorf("gateway: reload: copying bindings to the new scheduler: %w", err)
		}
	}
	if newProber { // last step that can fail: the new prober retires the old one
		if rt.prober, err = g.newProber(rt, old.prober, heldDown...); err != nil {
			return false, err
		}
		// What the new prober holds Down after taking over (the old one may have marked a
		// backend Down since heldDown was read): the log's held_down.
		heldDown = nil
		for _, b := range rt.backends {
			if rt.prober != nil && rt.prober.State(b.id) == health.Down {
				heldDown = append(heldDown, b.id)
			}
		}
	}
	if migrate {
		rt.life = newLife(rt.sched, rt)
	} else {
		rt.life = old.life
	}
	for _, id := range backDown { // Down before the first request can pick it
		from := rt.sched.Health().State(id)
		rt.sched.OnBackendDown(id)
		if to := rt.sched.Health().State(id); to != from {
			g.logStateChange(id, from, to,
				"reload: added back with the URL it had when a reload removed it while its active health check was down")
		}
	}
	drained, undrained := g.applyDrains(old, rt) // before the first request on rt can pick a drained backend
	if migrate {
		g.retired.add(old.life) // its requests in flight still count in the load gauges
	}
	g.rt.Store(rt)
	rt.life.prune(rt) // after the store: a request on a snapshot it drops has unpinned (pin)
	g.pruneRetired()
	if migrate {
		// Bindings made on the old scheduler while the copy ran; requests still on an old
		// snapshot forward the ones they make from now on (schedLife.forward).
		old.life.next.Store(rt.life)
		moved += copyLateBindings(old.sched, rt.sched, copied)
	}

	var added, removed []string
	for _, b := range rt.backends {
		if old.byID[b.id] == nil {
			added = append(added, b.id)
			g.gone.remove(b.id)
		}
	}
	for _, b := range old.backends {
		if rt.byID[b.id] == nil {
			// Drained: not a candidate any more. Forget its health state (observation and
			// operator drain) so that, added again later, it is not held Down or Draining by
			// a mark nothing would lift.
			removed = append(removed, b.id)
			if old.prober != nil && old.prober.State(b.id) == health.Down {
				g.gone.add(b.id, b.url.String())
			}
			g.outliers.forget(b.id)
			g.probeCauses.forget(b.id)
			continue // its health state goes with the Retain below
		}
		// A backend the old prober held Down stays Down in the new one (heldDown: it rises
		// after success_threshold probes, logged by onProbe). With health disabled there
		// is no prober to lift the mark, and a changed URL is another server: mark it up
		// (logged). Ejected backends stay down until their ejection ends.
		if newProber && old.prober != nil && old.prober.State(b.id) == health.Down &&
			(rt.prober == nil || rt.prober.State(b.id) != health.Down) && !g.isPassive(b.id) {
			why := "reload: health checks disabled; nothing would lift the active check's Down"
			if rt.prober != nil {
				why = "reload: url changed; the new prober starts it healthy"
			}
			from := rt.sched.Health().State(b.id)
			rt.sched.OnBackendUp(b.id)
			if to := rt.sched.Health().State(b.id); to != from {
				g.logStateChange(b.id, from, to, why)
			}
		}
	}
	if len(removed) > 0 {
		// One write for every removed backend: a Forget each copied the health set once
		// per ID (O(n²) when a reload replaces many backends; health.Set.Retain).
		ids := make([]string, len(rt.backends))
		for i, b := range rt.backends {
			ids[i] = b.id
		}
		rt.sched.Health().Retain(ids)
	}
	select { // restart Run's loops on the new state
	case g.reloaded <- struct{}{}:
	default:
	}
	if old.tenants.rekeys(rt.tenants) {
		// Every binding key changed ("t:<tag>:" added, removed or changed): the bindings
		// copied over are no longer found. Decision: warn rather than refuse the reload
		// (turning scoping on is a security fix that should not wait for a restart).
		g.log.Warn("tenant scoping changed: every session's binding key changed, so existing sessions are placed "+
			"again on their next turn (a miss, and a move where HRW picks another backend); the old bindings "+
			"stay until their TTL, so the previous scoping restored within it finds them again",
			"tenant_before", old.tenants.describe(), "tenant_after", rt.tenants.describe())
	}
	if salt := rt.cfg.Tenant.CacheSalt; salt != old.cfg.Tenant.CacheSalt || salt && old.tenants.rekeys(rt.tenants) {
		// The cache_salt the backends see changed (added, removed, or derived from another
		// identity or secret): vLLM keys its prefix cache by it. Decision: warn, as for
		// scoping; bindings are not touched by this.
		g.log.Warn("tenant cache_salt changed: the vLLM prefix-cache key of every salted request changed, so "+
			"their cached prefixes go cold (recomputed once on the same backend); sessions do not move",
			"cache_salt_before", old.cfg.Tenant.CacheSalt, "cache_salt_after", salt)
	}
	if p := rt.cfg.BindingSnapshot; p != old.cfg.BindingSnapshot && p != "" {
		// Serve locks the path named at start only (snapshot_lock.go; tester48).
		g.log.Warn("binding_snapshot changed: the bindings are saved to the new path at shutdown without its lock (Serve takes it at start only); no other gateway may use that file",
			"from", old.cfg.BindingSnapshot, "to", p)
	}
	weights, tiers, urls := backendChanges(old, rt)
	g.log.Info("config reloaded", "trigger", trigger, "backends", len(rt.backends), "added", logList(added), "removed", logList(removed),
		"weight_changed", logList(weights), "tier_changed", logList(tiers), "url_changed", logList(urls),
		"drained", logList(drained), "undrained", logList(undrained), "affinity_rebuilt", migrate, "bindings_copied", moved, "prober_rebuilt", newProber, "held_down", logList(heldDown))
	g.warnSharedURLs(true, old.cfg.Backends, rt.cfg.Backends)
	return false, nil
}

// sameProbing reports whether the prober of a can serve b unchanged.
func sameProbing(a, b *routing) bool {
	if a.cfg.healthEnabled() != b.cfg.healthEnabled() || a.cfg.Health.ProbeConfig != b.cfg.Health.ProbeConfig {
		return false
	}
	return !b.cfg.healthEnabled() || slices.EqualFunc(a.backends, b.backends, func(x, y *backend) bool {
		return x.id == y.id && x.url.String() == y.url.String()
	})
}

func (g *Gateway) isPassive(id string) bool { return g.outliers.isEjected(id) }

// bindingSet is a set of binding keys (tier, session ID) by a 64-bit hash: a few bytes a
// binding, where the keys themselves would pin their strings. A collision (about one in
// 2^64 per pair) can only make copyLateBindings skip a late binding, which its session
// then makes again.
type bindingSet struct {
	seed maphash.Seed
	m    map[uint64]struct{}
}

func (s *bindingSet) hash(b affinity.Binding) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	_ = h.WriteByte(byte(len(b.Tier))) // at most affinity.MaxTierBytes (255): tier and session stay apart
	_, _ = h.WriteString(b.Tier)
	_, _ = h.WriteString(b.SessionID)
	return h.Sum64()
}

func (s *bindingSet) add(b affinity.Binding) { s.m[s.hash(b)] = struct{}{} }

func (s *bindingSet) has(b affinity.Binding) bool {
	_, ok := s.m[s.hash(b)]
	return ok
}

// copyBindings copies every valid binding of from into to (keys to already has are kept)
// through a snapshot, and returns how many of them to holds afterwards (to's cap may
// evict the oldest: each is counted once as an eviction) and the keys of from it saw
// before the snapshot was taken, for [copyLateBindings].
func copyBindings(from, to *affinity.Scheduler) (int, bindingSet, error) {
	seen := bindingSet{seed: maphash.MakeSeed(), m: make(map[uint64]struct{}, from.Len())}
	from.Table().Range(func(b affinity.Binding) bool {
		seen.add(b)
		return true
	})
	var buf bytes.Buffer
	if _, err := from.Snapshot(&buf); err != nil {
		return 0, seen, err
	}
	n, err := to.Restore(&buf)
	return n, seen, err
}

// copyLateBindings copies into to the bindings of from whose keys are not in seen: those
// made on from by requests that started before the reload switched to to, while
// copyBindings ran. Each one is bound with its tier's full TTL in to (it was made moments
// ago); a key to already has keeps its binding, and a binding copyBindings stored and
// to's cap evicted is not stored again (it is in seen). It returns how many it bound.
// Cost: O(bindings of from).
func copyLateBindings(from, to *affinity.Scheduler, seen bindingSet) int {
	n := 0
	tt := to.Table()
	from.Table().Range(func(b affinity.Binding) bool {
		if seen.has(b) {
			return true
		}
		if _, ok := tt.Get(b.SessionID, b.Tier); ok {
			return true
		}
		if tt.Bind(b.SessionID, b.Tier, b.BackendID) == nil && tt.TTL(b.Tier) > 0 {
			n++
		}
		return true
	})
	return n
}
