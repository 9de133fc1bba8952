package h1_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
)

type ctxKey struct{}

// TestRequestContext: the context comes from BaseContext, carries the local address,
// and is cancelled when the handler returns; RemoteAddr is the client's.
func TestRequestContext(t *testing.T) {
	ctxs := make(chan context.Context, 1)
	remote := make(chan string, 1)
	s := &h1.Server{
		BaseContext: func(net.Listener) context.Context { return context.WithValue(context.Background(), ctxKey{}, "base") },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Context().Err() != nil {
				panic("cancelled early")
			}
			ctxs <- r.Context()
			remote <- r.RemoteAddr
		}),
	}
	addr, _ := serve(t, s)
	cl := dial(t, addr)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	cl.response("GET")
	ctx := <-ctxs
	if ctx.Value(ctxKey{}) != "base" {
		t.Error("BaseContext's value missing")
	}
	if a, _ := ctx.Value(http.LocalAddrContextKey).(net.Addr); a == nil || a.String() != addr {
		t.Errorf("LocalAddrContextKey %v, want %s", a, addr)
	}
	if ctx.Err() == nil {
		t.Error("context not cancelled after the handler")
	}
	if got := <-remote; got != cl.c.LocalAddr().String() {
		t.Errorf("RemoteAddr %q, want %q", got, cl.c.LocalAddr())
	}
}

// TestPanic: a handler panic is logged (not http.ErrAbortHandler) and the connection
// closed.
func TestPanic(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v      any
		logged bool
	}{{"panic", "boom", true}, {"ErrAbortHandler", http.ErrAbortHandler, false}} {
		t.Run(tc.name, func(t *testing.T) {
			addr, lb := serve(t, &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic(tc.v) })})
			cl := dial(t, addr)
			cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
			if got := cl.raw(); got != "" {
				t.Errorf("got %q, want the connection closed", got)
			}
			if got := strings.Contains(lb.String(), "panic serving"); got != tc.logged {
				t.Errorf("logged %v, want %v: %q", got, tc.logged, lb.String())
			}
		})
	}
}

// TestShutdown: idle connections close at once; an active one finishes its response
// (Connection: close) and then closes; Shutdown returns nil after it, Serve
// http.ErrServerClosed, and a Serve after that returns at once.
func TestShutdown(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	s := &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done")
	})}
	addr, _ := serve(t, s)
	idle := dial(t, addr)
	idle.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	idle.response("GET")
	fresh := dial(t, addr)
	active := dial(t, addr)
	active.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	if !idle.closed() || !fresh.closed() {
		t.Error("idle connection not closed")
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(release)
	resp, body := active.response("GET")
	if body != "done" || !resp.Close {
		t.Errorf("got %q close %v, want done and Connection: close", body, resp.Close)
	}
	if !active.closed() {
		t.Error("active connection kept after its response")
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v", err)
	}
}

// TestShutdownTimeout: Shutdown returns ctx's error when a request outlasts it; Close
// then ends the connection.
func TestShutdownTimeout(t *testing.T) {
	started := make(chan struct{})
	s := &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	})}
	addr, _ := serve(t, s)
	cl := dial(t, addr)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown: %v, want context.Canceled", err)
	}
	_ = s.Close()
	cl.raw()
}

// countingListener counts the Write calls on its connections.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.writes}, nil
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestOneWrite: a small response is one write system call.
func TestOneWrite(t *testing.T) {
	var writes atomic.Int64
	s := &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(countingListener{ln, &writes}) }()
	defer func() { s.Close(); <-errc }()
	cl := dial(t, ln.Addr().String())
	for range 3 {
		before := writes.Load()
		cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		cl.response("GET")
		if got := writes.Load() - before; got != 1 {
			t.Errorf("%d writes, want 1", got)
		}
	}
}

// TestReadHeaderTimeout: a request whose header does not arrive in time gets no
// answer; the connection closes.
func TestReadHeaderTimeout(t *testing.T) {
	addr, _ := serve(t, &h1.Server{ReadHeaderTimeout: 50 * time.Millisecond, IdleTimeout: time.Hour, Handler: http.HandlerFunc(echo)})
	cl := dial(t, addr)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	cl.response("GET") // a second request's header, begun and never ended, times out
	cl.send("GET / HTTP/1.1\r\n")
	if got := cl.raw(); got != "" {
		t.Errorf("got %q, want the connection closed", got)
	}
}

// TestAbortedResponse: httputil.ReverseProxy aborts a response it cannot finish only
// under a server (http.ServerContextKey set): the client then sees it cut, not ended.
func TestAbortedResponse(t *testing.T) {
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(http.ServerContextKey) == nil {
			return
		}
		io.WriteString(w, strings.Repeat("x", 5000))
		panic(http.ErrAbortHandler)
	})})
	cl := dial(t, addr)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(cl.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("body read: %v, want io.ErrUnexpectedEOF", err)
	}
}
