package gateway

import (
	"context"
	"net"
	"net/http"
	"strings"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
)

// Values of [Config].Server: the HTTP/1.x server [Gateway.Serve] serves the main
// listener with.
const (
	// ServerNetHTTP is net/http's http.Server ([Gateway.HTTPServer]). The default (""),
	// so that embedders keep the server they know; the example config turns direct on.
	ServerNetHTTP = "nethttp"
	// ServerDirect is the gateway's own HTTP/1.x server (internal/h1): one goroutine per
	// connection and no per-request background read, net/http's request parser, its
	// server's checks and its response framing, with the bounds of [Gateway.HTTPServer]
	// (read_header_seconds, client_idle_seconds, max_header_bytes). A client that leaves
	// while its request runs cancels the request (and its backend attempt) within about
	// 75 ms of the request's start instead of at once (h1.DefaultClientGoneAfter plus a
	// sweep tick). Plain-text HTTP/1.x only, as the gateway's listener is anyway.
	ServerDirect = "direct"
)

// httpServer is what [Gateway.Serve] and its drain need of the server: *http.Server
// and *h1.Server both are.
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

var (
	_ httpServer = (*http.Server)(nil)
	_ httpServer = (*h1.Server)(nil)
)

// isDirectServer reports whether name (Config.Server) selects [ServerDirect].
func isDirectServer(name string) bool { return strings.EqualFold(name, ServerDirect) }

// validServer reports whether name is a value of Config.Server ("" included).
func validServer(name string) bool {
	return name == "" || isDirectServer(name) || strings.EqualFold(name, ServerNetHTTP)
}

// newServer returns the server of [Gateway.Serve]'s main listener, chosen by
// Config.Server, serving h with every request's context derived from base.
func (g *Gateway) newServer(h http.Handler, base context.Context) httpServer {
	srv := g.HTTPServer()
	baseCtx := func(net.Listener) context.Context { return base }
	if !isDirectServer(g.state().cfg.Server) {
		srv.Handler, srv.BaseContext = h, baseCtx
		return srv
	}
	return &h1.Server{
		Handler:           h,
		ReadHeaderTimeout: srv.ReadHeaderTimeout,
		IdleTimeout:       srv.IdleTimeout,
		MaxHeaderBytes:    srv.MaxHeaderBytes,
		ErrorLog:          srv.ErrorLog,
		BaseContext:       baseCtx,
	}
}
