package gateway

import (
	"errors"
	"fmt"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/metrics"
)

// ErrStoreConfig: a bad store.* field (wraps redisstore's error, e.g.
// redisstore.ErrAddress or redisstore.ErrPasswordEnv).
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
// its background failures in the gateway's recorder (agentserve_affinity_store_errors_total).
func (g *Gateway) openStore(cfg *redisstore.Config) ([]affinity.Option, error) {
	if cfg == nil {
		return nil, nil
	}
	sr, _ := g.rec.(metrics.StoreRecorder) // the Prometheus exporter counts store errors
	st, err := redisstore.New(*cfg, redisstore.WithRecorder(sr))
	if err != nil {
		return nil, invalidFrom(ErrStoreConfig, "store", err, redisstore.ErrInvalidConfig)
	}
	g.store = st
	g.log.Info("gateway: bindings shared on Redis", "address", cfg.Address)
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
