package h1_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
)

// fakeClock drives a server's client-gone sweeper.
type fakeClock struct {
	ticks chan time.Time
	now   atomic.Int64
}

func newFakeClock(s *h1.Server) *fakeClock {
	fc := &fakeClock{ticks: make(chan time.Time)}
	fc.now.Store(time.Unix(1000, 0).UnixNano())
	h1.SetClock(s, fc.ticks, func() time.Time { return time.Unix(0, fc.now.Load()) })
	return fc
}

// tick advances the clock by d and ticks (blocking until the sweeper takes it).
func (fc *fakeClock) tick(d time.Duration) {
	fc.now.Add(int64(d))
	fc.ticks <- time.Unix(0, fc.now.Load())
}

// TestClientGone: a client that closes while its request runs past ClientGoneAfter
// cancels the request's context with cause ErrClientGone; one still running under it
// is not watched yet.
func TestClientGone(t *testing.T) {
	started := make(chan struct{})
	causes := make(chan error, 1)
	s := &h1.Server{ClientGoneAfter: 100 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		causes <- context.Cause(r.Context())
	})}
	fc := newFakeClock(s)
	addr, _ := serve(t, s)
	cl := dial(t, addr)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	cl.c.Close()
	fc.tick(50 * time.Millisecond) // under the threshold: not watched
	select {
	case err := <-causes:
		t.Fatalf("cancelled (%v) before ClientGoneAfter", err)
	default:
	}
	fc.tick(50 * time.Millisecond)
	if err := <-causes; !errors.Is(err, h1.ErrClientGone) {
		t.Errorf("cause %v, want ErrClientGone", err)
	}
}

// TestClientGonePipelined: a byte the watch reads (the next pipelined request) is
// served after the request it watched, which is not cancelled.
func TestClientGonePipelined(t *testing.T) {
	started, release := make(chan struct{}, 2), make(chan struct{})
	s := &h1.Server{ClientGoneAfter: 100 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		if r.URL.Path == "/1" {
			<-release
			if r.Context().Err() != nil {
				w.WriteHeader(500)
				return
			}
		}
		w.Write([]byte(r.URL.Path))
	})}
	fc := newFakeClock(s)
	addr, _ := serve(t, s)
	cl := dial(t, addr)
	cl.send("GET /1 HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	fc.tick(time.Second) // the watcher starts, waits for a byte
	cl.send("GET /2 HTTP/1.1\r\nHost: h\r\n\r\n")
	fc.tick(time.Second) // a second tick does not start a second watcher
	close(release)
	for _, want := range []string{"/1", "/2"} {
		resp, body := cl.response("GET")
		if resp.StatusCode != 200 || body != want {
			t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
}

// TestClientGoneBodyUnread: a request whose body is not read to its end is never
// watched (the watch would take body bytes).
func TestClientGoneBodyUnread(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	s := &h1.Server{ClientGoneAfter: 100 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		b := make([]byte, 10)
		n, _ := r.Body.Read(b)
		w.Write(b[:n])
	})}
	fc := newFakeClock(s)
	addr, _ := serve(t, s)
	cl := dial(t, addr)
	cl.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n")
	<-started
	fc.tick(time.Second)
	cl.send("abc")
	close(release)
	if _, body := cl.response("POST"); body != "abc" {
		t.Errorf("got %q, want abc", body)
	}
}
