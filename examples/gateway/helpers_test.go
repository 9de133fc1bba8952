package gateway_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// seen records what the backends received.
type seen struct {
	mu     sync.Mutex
	bodies []string
	auth   []string
}

func (s *seen) last() (body, auth string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[len(s.bodies)-1], s.auth[len(s.auth)-1]
}

// testGateway starts three echo backends b0..b2 and a gateway over them configured
// with extra YAML. It returns the gateway, what the backends saw, and their IDs.
func testGateway(t *testing.T, extra string, opts ...gateway.Option) (*gateway.Gateway, *seen) {
	t.Helper()
	rec := &seen{}
	var yaml strings.Builder
	yaml.WriteString("backends:\n")
	for _, id := range []string{"b0", "b1", "b2"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			rec.mu.Lock()
			rec.bodies = append(rec.bodies, string(body))
			rec.auth = append(rec.auth, r.Header.Get("Authorization"))
			rec.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		}))
		t.Cleanup(srv.Close)
		yaml.WriteString("  - {id: " + id + ", url: \"" + srv.URL + "\"}\n")
	}
	yaml.WriteString(extra)
	cfg, err := gateway.ParseConfig([]byte(yaml.String()))
	require.NoError(t, err)
	g, err := gateway.New(cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return g, rec
}

// do sends a chat completion with the given headers and returns the response.
func do(t *testing.T, g *gateway.Gateway, path, body string, headers map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	return rec
}

// hrwBackend is the backend ID the Scheduler's HRW picks for session among b0..b2.
func hrwBackend(t *testing.T, session string) string {
	t.Helper()
	s, err := affinity.New(affinity.Config{})
	require.NoError(t, err)
	bs := []affinity.Backend{affinity.MustBackend("b0", "", 1), affinity.MustBackend("b1", "", 1), affinity.MustBackend("b2", "", 1)}
	b, _, err := s.SelectBackend(session, "", bs)
	require.NoError(t, err)
	return b.ID()
}

// captureLogs returns a Debug-level JSON logger writing into the returned buffer.
func captureLogs() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// requestServer is a TCP backend that reads each connection's one request (its body
// drained), runs answer on the raw connection and closes it; it returns the URL. For
// answers net/http's server will not write: cut bodies, resets, unsolicited 1xx.
func requestServer(t *testing.T, answer func(c net.Conn, req *http.Request)) string {
	t.Helper()
	return rawServer(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		answer(c, req)
	})
}

// rawServer is a TCP backend on loopback that runs serve on each accepted connection
// (in its own goroutine) and closes it when serve returns; it returns the URL. The
// listener and every connection's goroutine end with the test.
func rawServer(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	})
	return "http://" + ln.Addr().String()
}

// serveGateway serves a gateway over one backend b0 at url (backend_client client,
// health checks off, the rest of the config extra, YAML lines) on an httptest server,
// closed with its gateway at the test's end.
func serveGateway(t *testing.T, client, url string, extra ...string) *front {
	t.Helper()
	return serveGatewayOn(t, gateway.ServerNetHTTP, client, url, extra...)
}

// serveGatewayOn is serveGateway with the front server server (gateway.ServerNetHTTP
// or ServerDirect).
func serveGatewayOn(t *testing.T, server, client, url string, extra ...string) *front {
	t.Helper()
	cfg, err := gateway.ParseConfig([]byte("health: {enabled: false}\nbackend_client: " + client + "\n" +
		strings.Join(extra, "") + "backends:\n  - {id: b0, url: \"" + url + "\"}\n"))
	require.NoError(t, err)
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return newFront(t, server, g, nil)
}

// dialGateway serves a gateway over one backend b0 at url (backend_client client, health
// checks off) and returns a raw connection to it with a 10 s deadline, for tests that
// read the exact bytes a client gets. Everything is closed at the test's end.
func dialGateway(t *testing.T, client, url string) net.Conn {
	t.Helper()
	return dialGatewayOn(t, gateway.ServerNetHTTP, client, url)
}

// dialGatewayOn is dialGateway with the front server server.
func dialGatewayOn(t *testing.T, server, client, url string) net.Conn {
	t.Helper()
	srv := serveGatewayOn(t, server, client, url)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	return c
}
