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
	// connection; zero or negative: no bound (net/http falls back to its ReadTimeout,
	// which this server does not have).
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
	if !s.trackListener(&ln, true) {
		_ = ln.Close()
		return http.ErrServerClosed
	}
	defer s.trackListener(&ln, false)
	defer ln.Close()
	base := context.Background()
	if s.BaseContext != nil {
		if base = s.BaseContext(ln); base == nil {
			return ErrNilBaseContext
		}
	}
	// httputil.ReverseProxy aborts a response it cannot finish (panic
	// http.ErrAbortHandler, so the client sees it cut) only under a server: it looks for
	// http.ServerContextKey. It holds s here, not an *http.Server.
	base = context.WithValue(base, http.ServerContextKey, s)
	base = context.WithValue(base, http.LocalAddrContextKey, ln.Addr())
	s.startSweeper()
	var pause time.Duration
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.shutting.Load() {
				return http.ErrServerClosed
			}
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				s.logf("h1: Accept error: %v; retrying in %v", err, pause)
				t := time.NewTimer(pause)
				<-t.C
				continue
			}
			return err
		}
		pause = 0
		c := s.newConn(rwc, base)
		if !s.trackConn(c, true) {
			_ = rwc.Close()
			continue
		}
		go c.serve()
	}
}

// trackListener adds (or removes) ln; false when adding after shutdown began.
func (s *Server) trackListener(ln *net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.shutting.Load() {
			return false
		}
		if s.listeners == nil {
			s.listeners = make(map[*net.Listener]struct{})
		}
		s.listeners[ln] = struct{}{}
		return true
	}
	delete(s.listeners, ln)
	return true
}

// trackConn adds (or removes) c; false when adding after shutdown began. The last
// removal after shutdown began wakes Shutdown.
func (s *Server) trackConn(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.shutting.Load() {
			return false
		}
		if s.conns == nil {
			s.conns = make(map[*conn]struct{})
		}
		s.conns[c] = struct{}{}
		return true
	}
	if _, ok := s.conns[c]; !ok {
		return true
	}
	delete(s.conns, c)
	if len(s.conns) == 0 && s.allGone != nil {
		close(s.allGone)
		s.allGone = nil
	}
	return true
}

// beginShutdown marks the server shutting down and closes its listeners; it returns
// the first error of closing one.
func (s *Server) beginShutdown() error {
	s.shutting.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for ln := range s.listeners {
		if cerr := (*ln).Close(); cerr != nil && err == nil {
			err = cerr
		}
		delete(s.listeners, ln)
	}
	s.sweep.wakeLocked() // it notices the shutdown and exits once nothing is in flight
	return err
}

// Shutdown stops the server gracefully: it closes the listeners (Serve returns
// http.ErrServerClosed), closes each idle connection at once (one waiting for a
// request's first byte, new connections included) and each active one once its
// response has ended (those responses carry Connection: close), and waits for the last
// connection to close. Decision: a request whose first byte had arrived when Shutdown
// began is served (with Connection: close), where net/http drops one whose header
// completes after it. It returns nil then, or ctx.Err() if ctx ends first (the
// connections left keep going; call Close, or Shutdown again, to end them). Hijacked
// connections are not tracked: neither waited for nor closed. It may be called more
// than once.
func (s *Server) Shutdown(ctx context.Context) error {
	_ = s.beginShutdown()
	s.mu.Lock()
	for c := range s.conns {
		c.closeIfIdle()
	}
	if len(s.conns) == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.allGone == nil {
		s.allGone = make(chan struct{})
	}
	done := s.allGone
	s.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once (not hijacked ones); the
// requests running see their connection fail. It returns the first error of closing
// a listener. Shutdown after Close returns once those connections' goroutines have
// ended.
func (s *Server) Close() error {
	err := s.beginShutdown()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.rwc.Close()
	}
	s.mu.Unlock()
	return err
}

// logf writes to ErrorLog, or the standard logger.
func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// headerLimit is the bytes read for a request's line and headers at most.
func (s *Server) headerLimit() int64 {
	n := s.MaxHeaderBytes
	if n <= 0 {
		n = http.DefaultMaxHeaderBytes
	}
	return int64(n) + 4096
}

// idleTimeout is the wait for a kept-alive connection's next request (<= 0: none).
func (s *Server) idleTimeout() time.Duration { return s.IdleTimeout }

// handler is Handler or http.DefaultServeMux.
func (s *Server) handler() http.Handler {
	if s.Handler != nil {
		return s.Handler
	}
	return http.DefaultServeMux
}
