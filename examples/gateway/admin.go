package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/netutil"
)

// Bounds of the admin listener (admin_listen): its own, not the main listener's
// timeouts and limits. Its answers are small and quick (/metrics is the largest), so a
// client that holds a connection longer than these is slow or hostile.
const (
	adminReadHeaderTimeout = 5 * time.Second  // request line and headers
	adminReadTimeout       = 10 * time.Second // the whole request, body included
	adminWriteTimeout      = 30 * time.Second // from the end of the headers to the end of the answer
	adminIdleTimeout       = 30 * time.Second // a keep-alive connection between requests
	adminMaxHeaderBytes    = 16 << 10
	// adminMaxConnections bounds the admin listener's connections at once (more wait in
	// the backlog), so that clients of the admin port cannot take the file descriptors
	// the main listener needs; with the timeouts above a request holds its slot 40 s
	// at most, and an idle connection 30 s.
	adminMaxConnections = 64
	// adminCloseWait bounds the wait for the admin listener's requests in flight when
	// [Gateway.Serve] closes it, after the main server and the binding snapshot.
	adminCloseWait = time.Second
)

// Readiness of the gateway under [Gateway.Serve], for /readyz.
const (
	phaseServing  int32 = iota // not under Serve (an embedder's server), or Serve is serving
	phaseStarting              // Serve is loading the binding snapshot: the main listener is not served yet
	phaseDraining              // Serve's shutdown drain has begun: no new connection is accepted
)

// validateAdmin checks admin_listen (part of [Config.Validate]); "" is off.
func (c Config) validateAdmin() error {
	if c.AdminListen == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(c.AdminListen)
	if err != nil {
		return invalid(ErrAdminListen, "admin_listen: %q: %v", c.AdminListen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return invalid(ErrAdminListen, "admin_listen: %q: port must be 0..65535", c.AdminListen)
	}
	mainHost, mainPort, err := net.SplitHostPort(c.Listen)
	if err != nil || p == 0 {
		return nil
	}
	if mp, err := strconv.Atoi(mainPort); err != nil || mp != p {
		return nil
	}
	if host == mainHost || anyHost(host) || anyHost(mainHost) {
		return invalid(ErrAdminListen, "admin_listen: %q: the same address as listen %q (give the admin listener its own port)", c.AdminListen, c.Listen)
	}
	return nil
}

// anyHost reports whether host means every interface.
func anyHost(host string) bool { return host == "" || host == "0.0.0.0" || host == "::" }

// adminServer is the admin listener's server, run by [Gateway.Serve].
type adminServer struct {
	srv  *http.Server
	done chan struct{} // closed when srv.Serve has returned
}

// addrBox holds a net.Addr for an atomic.Pointer.
type addrBox struct{ net.Addr }

// AdminAddr returns the address the admin listener (admin_listen) is bound to, which
// tells the port when admin_listen asks for port 0, or nil when admin_listen is off or
// [Gateway.Serve] has not bound it yet. It still returns the address after Serve has
// closed the listener. Safe for concurrent use; one atomic load.
func (g *Gateway) AdminAddr() net.Addr {
	if b := g.adminAddr.Load(); b != nil {
		return b.Addr
	}
	return nil
}

// startAdmin binds addr and serves /healthz, /readyz and /metrics there (any other path
// is a JSON 404) on a server of its own, bounded by the admin* constants and outside
// limits.max_connections, until close.
func (g *Gateway) startAdmin(addr string) (*adminServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: admin_listen %s: %w", addr, err)
	}
	g.adminAddr.Store(&addrBox{ln.Addr()})
	g.log.Info("admin listening", "admin_listen", ln.Addr().String())
	a := &adminServer{
		srv: &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !g.serveOps(w, r) {
					writeError(w, http.StatusNotFound, "not_found", "the admin listener serves /healthz, /readyz and /metrics only")
				}
			}),
			ReadHeaderTimeout: adminReadHeaderTimeout,
			ReadTimeout:       adminReadTimeout,
			WriteTimeout:      adminWriteTimeout,
			IdleTimeout:       adminIdleTimeout,
			MaxHeaderBytes:    adminMaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(a.done)
		err := a.srv.Serve(netutil.LimitListener(ln, adminMaxConnections))
		if !errors.Is(err, http.ErrServerClosed) {
			// Decision: the gateway keeps serving its traffic; the probes that fail now
			// tell the operator.
			g.log.Error("admin listener failed; the main listener keeps serving", "admin_listen", ln.Addr().String(), "err", err)
		}
	}()
	return a, nil
}

// close shuts the admin server down: the listener closes at once, requests in flight
// get adminCloseWait to finish, then the rest are closed. It returns once the server's
// goroutine has ended. A nil a does nothing.
func (a *adminServer) close() {
	if a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminCloseWait)
	defer cancel()
	if a.srv.Shutdown(ctx) != nil {
		_ = a.srv.Close()
	}
	<-a.done
}

// readiness is what /readyz says of the gateway itself before the backends: "" when
// it may take requests, else "starting" or "draining" (see phaseStarting, phaseDraining).
func (g *Gateway) readiness() string {
	switch g.phase.Load() {
	case phaseStarting:
		return "starting"
	case phaseDraining:
		return "draining"
	}
	return ""
}
