package h1_test

import (
	"context"
	"log"
	"net"
	"net/http"
	"time"
)

// confServer is what both servers under test offer: net/http's *http.Server and
// *h1.Server.
type confServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// confConfig holds the settings the conformance tests give both servers alike.
type confConfig struct {
	Handler           http.Handler
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	ErrorLog          *log.Logger
}

// newStd builds the reference: net/http's own server.
func newStd(c confConfig) confServer {
	return &http.Server{
		Handler:           c.Handler,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          c.ErrorLog,
	}
}

// newH1 builds the server under test. Until package h1's API is committed it is
// net/http's server too, which checks the harness itself (both sides must agree).
var newH1 = newStd

// h1ClientGone bounds h1's notice of a client leaving while a handler runs: its
// documented threshold plus one sweep tick, plus scheduling on a shared machine.
const h1ClientGone = time.Second
