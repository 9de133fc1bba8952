package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Run runs the background loops until ctx is done: the active prober (when
// health.enabled), the passive re-check of backends downed by connection errors, and
// the periodic reclamation of expired bindings (Scheduler.Sweep every sweep_seconds).
// It returns nil after ctx is done and every loop has stopped. Call it once, and not
// at all when using [Gateway.Serve] or [Gateway.ListenAndServe], which call it.
func (g *Gateway) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if g.prober != nil {
		wg.Go(func() {
			if err := g.prober.Run(ctx); err != nil && ctx.Err() == nil {
				g.log.Error("health prober stopped", "err", err)
			}
		})
	}
	wg.Go(func() { g.recheckLoop(ctx) })
	wg.Go(func() { g.sweepLoop(ctx) })
	wg.Wait()
	return nil
}

// sweepLoop reclaims expired bindings every sweep_seconds until ctx is done, so that
// the table shrinks even when traffic stops (inserts only reclaim a few at a time).
func (g *Gateway) sweepLoop(ctx context.Context) {
	every(ctx, g.sweep, g.cfg.SweepSeconds, func() {
		if n := g.sched.Sweep(); n > 0 {
			g.log.Debug("reclaimed expired bindings", "count", n)
		}
	})
}

// every calls fn on each tick until ctx is done. ticks drives it in tests; nil means a
// ticker every seconds.
func every(ctx context.Context, ticks <-chan time.Time, seconds float64, fn func()) {
	if ticks == nil {
		t := time.NewTicker(time.Duration(seconds * float64(time.Second)))
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			fn()
		}
	}
}

// Serve serves HTTP on ln and runs [Gateway.Run] until ctx is done, then shuts the
// server down gracefully (in-flight requests get up to 10 s) and closes idle
// backend connections. It returns nil after a clean shutdown.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 30 * time.Second}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Run(runCtx) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-errc: // listener failed
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if serr := srv.Shutdown(sctx); serr != nil {
			_ = srv.Close()
		}
		scancel()
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
			err = serr
		}
	}
	cancel()
	wg.Wait()
	g.Close()
	return err
}

// ListenAndServe listens on the configured address and calls [Gateway.Serve].
func (g *Gateway) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", g.cfg.Listen, err)
	}
	return g.Serve(ctx, ln)
}

// Close releases idle backend connections of the gateway-owned transport.
// Idempotent; it does not stop [Gateway.Run] (cancel its context for that).
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		if g.ownedBase != nil {
			g.ownedBase.CloseIdleConnections()
		}
	})
}
