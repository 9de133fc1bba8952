package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/netutil"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/rawio"
)

// Run runs the background loops until ctx is done: the active prober (when
// health.enabled), the passive re-check of backends downed by connection errors, and
// the periodic reclamation of expired bindings (Scheduler.Sweep every sweep_seconds) and,
// with load_report_seconds > 0, the load scrape (loadsched.go). After a [Gateway.Reload]
// it stops the loops and starts them again on the new state (new intervals, new
// prober); the load scrape keeps each remaining backend's schedule and report, and its
// scrapes in flight, across the reload, and scrapes new backends at once. It returns nil after ctx is done and every loop has
// stopped. Call it once, and not at all when using [Gateway.Serve] or
// [Gateway.ListenAndServe], which call it.
func (g *Gateway) Run(ctx context.Context) error {
	var scrapers sync.WaitGroup // the load scrape's workers outlive reloads (loadsched.go)
	defer scrapers.Wait()
	for {
		rt := g.state()
		lctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		if rt.prober != nil {
			wg.Go(func() {
				if err := rt.prober.Run(lctx); err != nil && lctx.Err() == nil {
					g.log.Error("health prober stopped", "err", err)
				}
			})
		}
		wg.Go(func() { g.recheckLoop(lctx, rt) })
		wg.Go(func() { g.sweepLoop(lctx, rt) })
		if rt.cfg.LoadReportSeconds > 0 { // loadsched.go
			g.startScrapeWorkers(ctx, &scrapers)
			wg.Go(func() { g.scrapeLoop(lctx, rt) })
		} else {
			g.logReportsOff(g.scrape.reset()) // turned on again later, no report is older than that
		}
		select {
		case <-ctx.Done():
		case <-g.reloaded:
		}
		cancel()
		wg.Wait()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// sweepLoop reclaims expired bindings every sweep_seconds until ctx is done, so that
// the table shrinks even when traffic stops (inserts only reclaim a few at a time).
func (g *Gateway) sweepLoop(ctx context.Context, rt *routing) {
	every(ctx, g.sweep, rt.cfg.SweepSeconds, func() {
		if n := g.state().sched.Sweep(); n > 0 {
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

// Serve serves HTTP on ln (at most limits.max_connections client connections at once,
// with the bounds of [Gateway.HTTPServer], on the server Config.Server names:
// net/http's, or the gateway's own with [ServerDirect]; the drain below holds for both) and runs [Gateway.Run] until ctx is done, then
// shuts the server down gracefully: it stops accepting, lets in-flight requests finish for up to
// drain_seconds (default 10 s) or until [Gateway.EndDrain]. Then each request still
// waiting for its backend's response headers, or still uploading its body (then with
// Connection: close), is answered a JSON 503 "shutdown" with Retry-After, and each event stream still running gets an SSE error event with code
// "shutdown" (see the package doc); at most 1 s is given for these answers, then the
// remaining connections are closed; each request cut so is logged at Info as "request
// cut by the shutdown drain", and Serve waits up to 1 s more for those handlers to
// return; upgrade tunnels (which http.Server.Shutdown does not track) are waited for like
// requests in flight — the drain lasts until the last one closes, or drain_seconds — and
// closed when it is over. It then closes idle backend connections and, when binding_snapshot is set,
// saves the bindings there ([Gateway.SaveBindings]). If the listener fails (Accept
// returns an error that is not temporary), Serve logs it and drains the requests in
// flight the same way before it returns the listener's error.
//
// Before serving it loads that file if it exists ([Gateway.LoadBindings]; a missing
// file is not an error), logging when the load starts and ends. Decisions:
//
//   - An empty file (0 bytes, say created ahead by touch or tmpfiles.d, which the config
//     check accepts) is no snapshot, as a missing one: logged at Info, nothing loaded or
//     renamed; the shutdown save replaces it.
//   - A loaded file is consumed (removed): after a crash the gateway starts empty rather
//     than restore bindings that may have moved since (each would come back as a hit on
//     a cold backend); the shutdown save writes a fresh one. If Serve fails after the
//     load (its listener fails), it still saves on the way out, so the bindings are not
//     lost; only a process that dies before its shutdown save starts empty next time.
//   - A damaged file, or one that cannot be read (permission denied, an I/O error), is
//     logged and renamed to the path plus [DamagedSnapshotSuffix], replacing an older
//     one, so the snapshot saved at shutdown does not overwrite it, and the gateway
//     starts with an empty table rather than not at all. An unreadable file that cannot
//     be renamed either is not saved over: the shutdown logs an Error and Serve returns
//     an error instead of replacing it.
//
// With admin_listen set, Serve first binds that address and serves /healthz, /readyz
// and /metrics there on a server of its own (admin.go: short timeouts of its own, not
// counted in limits.max_connections, so slow clients holding every main connection do
// not starve the probes), and closes it last, once the bindings are saved (requests on
// it get 1 s more). During the drain it still answers: /healthz 200 (the process is
// alive and finishing its requests) and /readyz 503 {"status":"draining"} (the main
// listener no longer accepts, as a probe there sees); while the snapshot loads, /readyz
// is 503 {"status":"starting"}. If the admin address cannot be bound, Serve closes ln and
// returns the error before loading anything. [Gateway.AdminAddr] tells the bound address.
// Once every listener is bound (ln, and admin_listen when set), and not before, Serve
// logs "gateway listening" at Info with the bound addresses (listen, admin_listen);
// the binding snapshot loads after that line.
//
// It returns nil after a clean shutdown, the listener's error, or the error of saving
// the snapshot (or of not saving it, as above).
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	var admin *adminServer // admin.go; closed last, after the snapshot is saved
	if addr := g.state().cfg.AdminListen; addr != "" {
		var err error
		if admin, err = g.startAdmin(addr); err != nil {
			_ = ln.Close()
			return err
		}
	}
	defer admin.close()
	// Only now is every listener bound: a gateway that exits because admin_listen is
	// taken has not claimed to listen (small2; it used to, as the command logged the
	// main listener's line before Serve bound the admin one).
	if admin != nil {
		g.log.Info("gateway listening", "listen", ln.Addr().String(), "admin_listen", g.AdminAddr().String())
	} else {
		g.log.Info("gateway listening", "listen", ln.Addr().String())
	}
	loaded := g.state().cfg.BindingSnapshot
	var keep error // loaded holds a file that must not be saved over
	if loaded != "" {
		g.phase.Store(phaseStarting)
		unlock, err := g.lockSnapshot(ctx, loaded) // snapshot_lock.go; held until after the save
		if err != nil {
			_ = ln.Close()
			if ctx.Err() != nil {
				g.log.Info("shut down while waiting for the binding_snapshot lock: nothing loaded or saved", "path", loaded)
				return nil
			}
			return err
		}
		defer unlock()
		keep = g.loadAtStart(loaded) // snapshot_damaged.go
	}
	g.phase.Store(phaseServing)
	// Hijacked connections (upgrade tunnels, tunnel.go) are not Shutdown's: they end with
	// their requests' contexts, cancelled when the drain is over.
	tunnels, closeTunnels := context.WithCancel(context.Background())
	defer closeTunnels()
	srv := g.newServer(g.drain.counted(g), tunnels) // counted: waited for after the drain
	ln = netutil.LimitListener(rawio.Listener(ln), g.state().cfg.Limits.MaxConnections)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Run(runCtx) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-errc: // the listener failed: drain the requests in flight as on a shutdown
		g.phase.Store(phaseDraining) // not ready either: nothing takes requests now
		g.log.Error("listener failed: no new connections; draining the requests in flight", "err", err)
		g.drainServer(ctx, srv, closeTunnels)
	case <-ctx.Done():
		g.phase.Store(phaseDraining)
		g.drainServer(ctx, srv, closeTunnels)
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
			err = serr
		}
	}
	cancel()
	wg.Wait()
	g.Close()
	if path := g.state().cfg.BindingSnapshot; path != "" {
		if keep != nil && path == loaded {
			serr := fmt.Errorf("gateway: binding snapshot not saved: %w", keep)
			g.log.Error("binding snapshot not saved: the file there could not be read at start nor kept aside, and saving would replace it", "path", path, "err", keep)
			return errors.Join(err, serr)
		}
		st, serr := g.saveBindings(path)
		if serr != nil {
			g.log.Error("binding snapshot not saved", "path", path, "err", serr)
			return errors.Join(err, serr)
		}
		if st.Skipped > 0 {
			g.log.Warn("binding snapshot: bindings the format cannot hold were left out", "path", path, "skipped", st.Skipped)
		}
		g.log.Info("binding snapshot saved", "path", path, "bindings", st.Bindings, "skipped", st.Skipped)
	}
	return err
}

// drainServer is Serve's shutdown drain of srv (shutdown), its log lines, and the
// bounded wait for the handlers it cut.
func (g *Gateway) drainServer(ctx context.Context, srv httpServer, closeTunnels func()) {
	drain := time.Duration(g.state().cfg.DrainSeconds * float64(time.Second))
	switch g.shutdown(ctx, srv, drain, closeTunnels) {
	case "drain_seconds":
		g.log.Warn("drain timeout: closing the remaining connections", "drain_seconds", g.state().cfg.DrainSeconds)
	case "EndDrain":
		g.log.Warn("drain ended early: closing the remaining connections", "why", "EndDrain (a second signal)")
	}
	// The cut handlers log their cut as they return: wait for them (bounded), so that
	// none is lost to a process that exits once Serve returns.
	wctx, cancel := context.WithTimeout(context.Background(), drainHandlerWait)
	defer cancel()
	if n := g.drain.waitHandlers(wctx); n > 0 {
		g.log.Warn("requests still running after the drain: not waited for", "requests", n, "waited", drainHandlerWait)
	}
}

// HTTPServer returns a new http.Server for the gateway with the downstream bounds of the
// configuration: ReadHeaderTimeout (timeouts.read_header_seconds), IdleTimeout
// (timeouts.client_idle_seconds) and MaxHeaderBytes (limits.max_header_bytes). The body
// read is bounded per request (timeouts.read_body_seconds) by the handler itself, and
// so is each write of the response (timeouts.client_write_seconds: a deadline renewed as
// the client reads); there is no WriteTimeout: streams last as long as the backend keeps
// sending (bounded by timeouts.stream_idle_seconds between chunks) and the client reads.
// [Gateway.Serve] uses it (with server: nethttp, the default; with [ServerDirect] it
// serves with the gateway's own server under the same bounds); embedders
// serving the gateway themselves should use it too.
// These are read when the server is made: a Reload does not change them.
func (g *Gateway) HTTPServer() *http.Server {
	cfg := g.state().cfg
	return &http.Server{
		Handler:           g,
		ReadHeaderTimeout: duration(cfg.Timeouts.ReadHeaderSeconds),
		IdleTimeout:       duration(cfg.Timeouts.ClientIdleSeconds),
		MaxHeaderBytes:    cfg.Limits.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
}

// ListenAndServe listens on the configured address and calls [Gateway.Serve] (which
// binds admin_listen too, when set).
func (g *Gateway) ListenAndServe(ctx context.Context) error {
	addr := g.state().cfg.Listen
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", addr, err)
	}
	return g.Serve(ctx, ln)
}

// Close releases idle backend connections of the gateway-owned transport (new ones are
// dialled as needed) and closes the shared binding store of the store: block, after
// which the gateway decides from its local table alone: call it after the last request.
// Idempotent; it does not stop [Gateway.Run] (cancel its context for that).
func (g *Gateway) Close() {
	if g.ownedBase != nil {
		g.ownedBase.CloseIdleConnections()
	}
	g.reloadMu.Lock() // probeTr changes only under it
	g.closeProbeIdle()
	g.reloadMu.Unlock()
	g.closeStore()
}
