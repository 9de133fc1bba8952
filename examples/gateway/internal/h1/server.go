package h1

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultClientGoneAfter is the default of [Server.ClientGoneAfter]: a request still
// running after it has its connection watched for the client leaving.
const DefaultClientGoneAfter = 50 * time.Millisecond

// ErrClientGone is the cause (context.Cause) of a request context cancelled because
// the client's connection was seen closed, reset or failing while its handler ran:
// by the client-gone watch (see [Server.ClientGoneAfter]) or by a failed write of the
// response. The context's Err is context.Canceled, as with net/http.
var ErrClientGone = errors.New("h1: client connection closed while the request was served")

// ErrNilBaseContext is returned by [Server.Serve] when BaseContext returns nil.
var ErrNilBaseContext = errors.New("h1: BaseContext returned a nil context")

// Server serves an http.Handler over plain-text HTTP/1.0 and HTTP/1.1 on one goroutine
// per connection (see the package doc for what it does and does not do). Set the fields
// before calling [Server.Serve] and do not change them afterwards; the zero value is
// ready to use (Handler nil serves http.DefaultServeMux). Serve, Shutdown and Close are
// safe for concurrent use.
type Server struct {
	// Handler answers each request; nil means http.DefaultServeMux.
	Handler http.Handler
	// ReadHeaderTimeout bounds the read of a request's line and headers, from its first
	// byte (for a connection's first request: from the accept); zero or negative: no
	// bound.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request's first byte on a kept-alive
	// connection; zero: ReadHeaderTimeout, and no bound when both are zero.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers, in bytes; zero or negative:
	// http.DefaultMaxHeaderBytes (1 MiB). As net/http, 4096 bytes of buffer slack are read
	// over it before the request is answered 431 Request Header Fields Too Large.
	MaxHeaderBytes int
	// ErrorLog receives the server's errors (a recovered handler panic, an accept error
	// retried, a handler's misuse of the ResponseWriter); nil means the log package's
	// standard logger.
	ErrorLog *log.Logger
	// BaseContext returns the base context of every request accepted on the listener
	// given to Serve (called once per Serve); nil means context.Background(). Each
	// request's context derives from it and is cancelled when its handler returns.
	BaseContext func(net.Listener) context.Context
	// ClientGoneAfter is how long a request runs before its connection is watched for
	// the client leaving: from then on (at the sweeper's next tick, every ClientGoneAfter/2)
	// a closed, reset or failed connection cancels the request's context with cause
	// [ErrClientGone]. So a client that leaves is noticed within about 1.5 x
	// ClientGoneAfter of the request's start (or of its leaving, if later), not at once
	// as with net/http. Zero means [DefaultClientGoneAfter]; negative turns the watch off.
	ClientGoneAfter time.Duration

	mu        sync.Mutex
	listeners map[*net.Listener]struct{}
	conns     map[*conn]struct{}
	allGone   chan struct{} // closed when conns empties after shutdown began; nil until asked
	shutting  atomic.Bool
	sweep     sweeper

	// Test seams (export_test.go): the sweeper's ticks and clock.
	testTicks <-chan time.Time
	testNow   func() time.Time
}

// Serve accepts connections on ln and serves each on a goroutine of its own until
// [Server.Shutdown] or [Server.Close]; it closes ln when it returns. It returns
// http.ErrServerClosed after Shutdown or Close (at once when called after them),
// [ErrNilBaseContext], or the listener's error: an Accept error that is temporary
// (a Temporary() bool method that reports true, as net/http) is logged and retried
// after a pause growing from 5 ms to 1 s.
func (s *Server) Serve(ln net.Listener) error {
	_ = ln.Close()
	return errors.New("h1: not implemented yet")
}

// Shutdown stops the server gracefully: it closes the listeners (Serve returns
// http.ErrServerClosed), closes each idle connection at once (one waiting for a
// request's first byte, new connections included) and each active one once its
// response has ended (those responses carry Connection: close), and waits for the last
// connection to close. It returns nil then, or ctx.Err() if ctx ends first (the
// connections left keep going; call Close, or Shutdown again, to end them). Hijacked
// connections are not tracked: neither waited for nor closed. It may be called more
// than once.
func (s *Server) Shutdown(ctx context.Context) error {
	return errors.New("h1: not implemented yet")
}

// Close closes the listeners and every connection at once (not hijacked ones); the
// requests running see their connection fail. It returns the first error of closing
// a listener. Shutdown after Close returns at once.
func (s *Server) Close() error {
	return errors.New("h1: not implemented yet")
}
