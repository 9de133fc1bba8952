package h1_test

import (
	"context"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
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

// newStd builds the reference: net/http's own server, its connections counted so
// that a test can wait for their goroutines (net/http's Close does not; after a 431 or
// a body too large one sleeps 500 ms before it closes, which goleak would report).
func newStd(c confConfig) confServer {
	s := &stdServer{}
	s.Server = &http.Server{
		Handler:           c.Handler,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          c.ErrorLog,
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				s.conns.Done()
			}
		},
	}
	return s
}

// stdServer is net/http's server with its connections counted.
type stdServer struct {
	*http.Server
	conns sync.WaitGroup
}

// wait returns once every connection's goroutine is done (after Serve returned).
func (s *stdServer) wait() { s.conns.Wait() }

// newH1 builds the server under test, ClientGoneAfter left at its default.
func newH1(c confConfig) confServer {
	return &h1.Server{
		Handler:           c.Handler,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          c.ErrorLog,
	}
}

// h1ClientGone bounds h1's notice of a client leaving while a handler runs: about
// 1.5 x ClientGoneAfter (documented: the threshold plus a tick of half of it), plus
// scheduling on a shared machine (the tests run with -race on two shared cores).
const h1ClientGone = 3*h1.DefaultClientGoneAfter/2 + 500*time.Millisecond
