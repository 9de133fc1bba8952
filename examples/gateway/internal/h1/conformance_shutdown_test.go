package h1_test

// Shutdown and Close, each server alike.

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestConformanceShutdown: Shutdown closes an idle connection at once, refuses new
// ones, lets the active request finish with Connection: close, then returns nil.
func TestConformanceShutdown(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	for _, s := range confServers {
		t.Run(s.name, func(t *testing.T) {
			started, release := make(chan struct{}), make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Handler", "1")
				if r.URL.Path == "/block" {
					close(started)
					<-release
				}
				_, _ = io.WriteString(w, "ok")
			})
			srv := startConf(t, s.name, s.mk, confConfig{Handler: h})
			idle, active := dialConf(t, srv.addr), dialConf(t, srv.addr)
			idleR := bufio.NewReader(idle)
			if _, err := io.WriteString(idle, get); err != nil {
				t.Fatal(err)
			}
			if resp, err := http.ReadResponse(idleR, nil); err != nil {
				t.Fatal(err)
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			if _, err := io.WriteString(active, req("GET", "/block")); err != nil {
				t.Fatal(err)
			}
			<-started

			shut := make(chan error, 1)
			go func() { shut <- srv.srv.Shutdown(confContext(t)) }()
			if b, _ := readUntilClosed(t, idle, idleR); len(b) != 0 {
				t.Errorf("idle connection: read %q before the close, want nothing", b)
			}
			select {
			case err := <-shut:
				t.Fatalf("Shutdown returned %v with a request in flight", err)
			default:
			}
			select {
			case err := <-srv.done:
				if !errors.Is(err, http.ErrServerClosed) {
					t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
				}
				srv.done <- err // for the cleanup's check
			case <-time.After(confDeadline):
				t.Error("Serve did not return after Shutdown")
			}
			if c, err := net.DialTimeout("tcp", srv.addr, confDeadline); err == nil {
				_ = c.SetDeadline(time.Now().Add(confDeadline))
				_, _ = io.WriteString(c, get)
				if b, _ := io.ReadAll(c); len(b) != 0 {
					t.Errorf("a connection after Shutdown was answered: %q", b)
				}
				_ = c.Close()
			}

			close(release)
			activeR := bufio.NewReader(active)
			resp, err := http.ReadResponse(activeR, nil)
			if err != nil {
				t.Fatalf("active connection: %v, want its answer", err)
			}
			if got := describe(resp); !resp.Close || !strings.HasSuffix(got, `body="ok"`) {
				t.Errorf("active connection: got %s (close %v), want the answer with Connection: close", got, resp.Close)
			}
			if b, _ := readUntilClosed(t, active, activeR); len(b) != 0 {
				t.Errorf("active connection: read %q after its answer, want the close", b)
			}
			select {
			case err := <-shut:
				if err != nil {
					t.Errorf("Shutdown = %v, want nil", err)
				}
			case <-time.After(confDeadline):
				t.Error("Shutdown did not return after the last connection closed")
			}
		})
	}
}

// TestConformanceCloseCancels: Close while a handler runs cancels its request context
// (net/http: its background read fails at once; h1: the client-gone watch's read fails
// once it starts, within the notice bound).
func TestConformanceCloseCancels(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	for _, s := range confServers {
		t.Run(s.name, func(t *testing.T) {
			started, gone := make(chan struct{}), make(chan error, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(started)
				select {
				case <-r.Context().Done():
					gone <- r.Context().Err()
				case <-time.After(confDeadline):
					gone <- nil
				}
			})
			srv := startConf(t, s.name, s.mk, confConfig{Handler: h})
			c := dialConf(t, srv.addr)
			if _, err := io.WriteString(c, req("GET", "/")); err != nil {
				t.Fatal(err)
			}
			<-started
			closed := time.Now()
			if err := srv.srv.Close(); err != nil {
				t.Errorf("Close = %v", err)
			}
			err := <-gone
			if d := time.Since(closed); !errors.Is(err, context.Canceled) || d > s.clientGone {
				t.Errorf("after Close: context error %v after %v, want context.Canceled within %v", err, d, s.clientGone)
			}
			if b, _ := readUntilClosed(t, c, c); len(b) != 0 {
				t.Errorf("read %q after Close, want nothing", b)
			}
		})
	}
}
