package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/metrics"
)

// ErrStoreConfig: a bad store.* field (wraps redisstore's error, e.g.
// redisstore.ErrAddress or redisstore.ErrPasswordEnv), or, from [New], settings the
// Redis server refuses (redisstore.ErrRejected: credentials or db).
var ErrStoreConfig = errors.New("gateway: bad store config")

// validateStore checks the optional store: block.
func (c Config) validateStore() error {
	if c.Store == nil {
		return nil
	}
	if err := c.Store.Validate(); err != nil {
		return invalidFrom(ErrStoreConfig, "store", err, redisstore.ErrInvalidConfig)
	}
	return nil
}

// openStore creates the shared binding store of the store: block (nil without one) and
// returns the Scheduler options that put it behind the binding table. The store counts
// its background failures and the keys its calls repaired in the gateway's recorder
// (agentserve_affinity_store_errors_total) and logs its availability changes on the
// gateway's logger.
//
// It checks Redis once (Store.Ping, bounded by store.dial_timeout_seconds): settings
// Redis refuses (credentials, db) are a configuration error and the gateway does not
// start; an unreachable Redis is logged once at WARN and the gateway starts degraded
// (bindings decided locally, shared again once Redis answers), as it serves through an
// outage. A reload cannot change the store block (ErrReloadNeedsRestart), so this is
// the only check.
func (g *Gateway) openStore(cfg *redisstore.Config) ([]affinity.Option, error) {
	if cfg == nil {
		return nil, nil
	}
	sr, _ := g.rec.(metrics.StoreRecorder) // the Prometheus exporter counts store errors
	st, err := redisstore.New(*cfg, redisstore.WithRecorder(sr), redisstore.WithLogger(g.log))
	if err != nil {
		return nil, invalidFrom(ErrStoreConfig, "store", err, redisstore.ErrInvalidConfig)
	}
	if err := st.Ping(context.Background()); err != nil {
		if errors.Is(err, redisstore.ErrRejected) {
			_ = st.Close()
			return nil, invalidFrom(ErrStoreConfig, "store", err, redisstore.ErrInvalidConfig)
		}
		g.log.Warn("gateway: Redis unreachable at start: bindings are decided locally, not shared, until it answers",
			"address", cfg.Address, "err", err.Error())
	} else {
		g.log.Info("gateway: bindings shared on Redis", "address", cfg.Address)
	}
	g.store = st
	return st.SchedulerOptions(), nil
}

// Store returns the shared binding store of the store: block, or nil without one.
func (g *Gateway) Store() *redisstore.Store { return g.store }

// closeStore closes the store, if any, after the Scheduler's last call.
func (g *Gateway) closeStore() {
	if g.store != nil {
		if err := g.store.Close(); err != nil {
			g.log.Warn("gateway: closing the binding store", "err", fmt.Sprint(err))
		}
	}
}
