package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

// routing is the gateway's routing state: the effective configuration, the backends, the
// per-tier candidate lists, the Scheduler and the active prober. It is immutable once
// published: [New] builds the first one, [Gateway.Reload] builds the next and swaps the
// pointer atomically, and every request reads one snapshot (loaded once in ServeHTTP and
// carried in its route) from start to finish, without a lock — the grpc-go picker pattern.
type routing struct {
	cfg        Config
	sched      *affinity.Scheduler
	life       *schedLife     // sched's use, shared with the other snapshots on it (outstanding.go)
	pins       *atomic.Int64  // requests pinning this snapshot (Gateway.pin); its own allocation, apart from the fields every request reads
	prober     *health.Prober // nil: health.enabled is false
	backends   []*backend
	byID       map[string]*backend
	byTier     map[string][]affinity.Backend
	tierNodes  map[string][]*backend
	knownTiers map[string]bool
	tenants    *tenants // nil: no tenant scoping

	// The configured request headers in canonical form (http.CanonicalHeaderKey), so
	// that reading them is a map lookup: Header.Get canonicalizes its argument on every
	// call, and allocates for a name such as X-Session-ID that is not canonical.
	sessionKeys, parentKeys []string
	tierKey                 string
	tenantKey               string // "": no tenant header
	// checked are the headers conflictingHeader checks, in order: session, parent session,
	// tier, tenant, and Authorization with tenant.api_key.
	checked []checkedHeader
}

// checkedHeader is a request header in canonical form (key) and as configured (name,
// for messages).
type checkedHeader struct{ key, name string }

// newRouting builds the backend and tier tables of cfg (validated, defaults applied);
// the caller sets sched and prober.
func newRouting(cfg Config) (*routing, error) {
	rt := &routing{
		cfg:        cfg,
		pins:       new(atomic.Int64),
		byID:       make(map[string]*backend, len(cfg.Backends)),
		byTier:     make(map[string][]affinity.Backend),
		tierNodes:  make(map[string][]*backend),
		knownTiers: map[string]bool{"": true},
		tenants:    newTenants(cfg.Tenant),
		tierKey:    http.CanonicalHeaderKey(cfg.TierHeader),
	}
	for _, h := range cfg.SessionHeaders {
		rt.sessionKeys = append(rt.sessionKeys, http.CanonicalHeaderKey(h))
		rt.checked = append(rt.checked, checkedHeader{http.CanonicalHeaderKey(h), h})
	}
	for _, h := range cfg.ParentSessionHeaders {
		rt.parentKeys = append(rt.parentKeys, http.CanonicalHeaderKey(h))
		rt.checked = append(rt.checked, checkedHeader{http.CanonicalHeaderKey(h), h})
	}
	if cfg.TierHeader != "" {
		rt.checked = append(rt.checked, checkedHeader{rt.tierKey, cfg.TierHeader})
	}
	if cfg.Tenant.Header != "" {
		rt.tenantKey = http.CanonicalHeaderKey(cfg.Tenant.Header)
		rt.checked = append(rt.checked, checkedHeader{rt.tenantKey, cfg.Tenant.Header})
	}
	if cfg.Tenant.APIKey {
		rt.checked = append(rt.checked, checkedHeader{"Authorization", "Authorization"})
	}
	for _, bc := range cfg.Backends {
		u, _ := url.Parse(bc.URL) // validated
		ab, err := affinity.NewBackend(bc.ID, bc.URL, bc.Weight)
		if err != nil {
			return nil, invalidFrom(ErrBackendWeight, fmt.Sprintf("backends: %q", bc.ID), err, affinity.ErrInvalidBackend)
		}
		b := &backend{id: bc.ID, url: u, ab: ab, node: ab.Node(), tier: bc.Tier, drain: bc.Drain, prog: newProgress()}
		rt.backends = append(rt.backends, b)
		rt.byID[b.id] = b
		rt.knownTiers[bc.Tier] = true
	}
	for _, t := range cfg.ModelTiers {
		rt.knownTiers[t] = true
	}
	for t := range cfg.Affinity.Tiers {
		rt.knownTiers[t] = true
	}
	for t := range rt.knownTiers {
		var abs []affinity.Backend
		var nodes []*backend
		for _, b := range rt.backends {
			if b.tier == t {
				abs = append(abs, b.ab)
				nodes = append(nodes, b)
			}
		}
		if len(abs) == 0 { // a tier without dedicated backends uses all of them
			for _, b := range rt.backends {
				abs = append(abs, b.ab)
				nodes = append(nodes, b)
			}
		}
		rt.byTier[t] = abs
		rt.tierNodes[t] = nodes
	}
	return rt, nil
}

// newProber builds the active prober of rt (nil when health.enabled is false). Its
// transitions go to whichever Scheduler is current when they happen. With from (the
// prober it replaces; nil at start), it takes over from's state, counts and schedule of
// the backends that keep their ID, URL and health path, and retires from
// (health.WithStateFrom): call it only when the reload can no longer fail.
func (g *Gateway) newProber(rt *routing, from *health.Prober, startDown ...string) (*health.Prober, error) {
	if !rt.cfg.healthEnabled() {
		return nil, nil
	}
	targets := make([]health.Target, len(rt.backends))
	for i, b := range rt.backends {
		targets[i] = health.Target{ID: b.id, URL: strings.TrimSuffix(b.url.String(), "/")}
	}
	popts := []health.ProberOption{
		health.WithObserver(g.onProbe), // applies to whichever Scheduler is current
		health.WithHTTPClient(&http.Client{Transport: g.probeTransport(rt, g.probeBase(rt)), CheckRedirect: noRedirect}),
	}
	if g.opts.probeTicks != nil {
		popts = append(popts, health.WithTicks(g.opts.probeTicks))
	}
	if len(startDown) > 0 {
		popts = append(popts, health.WithStartDown(startDown...))
	}
	if from != nil {
		popts = append(popts, health.WithStateFrom(from))
	}
	p, err := health.NewProber(rt.cfg.Health.ProbeConfig, targets, popts...)
	if err != nil {
		return nil, invalidFrom(ErrHealthConfig, "health", err, health.ErrInvalidProbeConfig, health.ErrInvalidTarget, health.ErrDuplicateTarget)
	}
	return p, nil
}

// state returns the current routing snapshot. Lock-free.
func (g *Gateway) state() *routing { return g.rt.Load() }
