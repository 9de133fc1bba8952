package h1_test

// Behaviour both servers must share that is not a byte diff: the request context
// cancelled when the client leaves, Shutdown with idle and active connections, the
// idle and header timeouts, panics logged (Shutdown and Close:
// conformance_shutdown_test.go; Hijack and late bytes: conformance_hijack_test.go). Each
// test runs once per server.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
)

// confServers names the two servers for the per-server subtests.
var confServers = []struct {
	name string
	mk   func(confConfig) confServer
	// clientGone is how soon after a client leaves the request context must be
	// cancelled: net/http notices at once (its background read); h1 within its
	// documented bound.
	clientGone time.Duration
	goneCause  error // context.Cause of a request whose client left
}{
	{"nethttp", newStd, stdClientGone, context.Canceled},
	{"h1", newH1, h1ClientGone, h1.ErrClientGone},
}

// stdClientGone bounds net/http's notice of a client leaving (immediate, plus
// scheduling on a shared machine).
const stdClientGone = time.Second

// dialConf dials addr with the conformance deadline on the connection.
func dialConf(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(confDeadline))
	return c
}

// readUntilClosed reads c until the server closes it and returns what it read and
// how long that took; a timeout fails the test.
func readUntilClosed(t *testing.T, c net.Conn, r io.Reader) ([]byte, time.Duration) {
	t.Helper()
	start := time.Now()
	b, err := io.ReadAll(r)
	if err != nil && !isReset(err) {
		t.Fatalf("reading until the server closes: %v (read %q)", err, b)
	}
	return b, time.Since(start)
}

func TestConformanceClientGone(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	for _, s := range confServers {
		for _, tc := range []struct{ name, request string }{
			{"get", req("GET", "/wait")},
			{"body-read", req("POST", "/wait", "Content-Length: 5\r\n") + "hello"},
			{"chunked-body-read", req("POST", "/wait", "Transfer-Encoding: chunked\r\n") + "5\r\nhello\r\n0\r\n\r\n"},
		} {
			t.Run(s.name+"/"+tc.name, func(t *testing.T) {
				started, gone := make(chan struct{}), make(chan time.Time, 1)
				var cause error
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					close(started)
					select {
					case <-r.Context().Done():
						cause = context.Cause(r.Context())
						gone <- time.Now()
					case <-time.After(confDeadline):
					}
				})
				srv := startConf(t, s.name, s.mk, confConfig{Handler: h})
				c := dialConf(t, srv.addr)
				if _, err := io.WriteString(c, tc.request); err != nil {
					t.Fatal(err)
				}
				select {
				case <-started:
				case <-time.After(confDeadline):
					t.Fatal("the handler did not start")
				}
				left := time.Now()
				_ = c.Close()
				select {
				case at := <-gone:
					if d := at.Sub(left); d > s.clientGone {
						t.Errorf("context cancelled %v after the client left, want <= %v", d, s.clientGone)
					}
					if !errors.Is(cause, s.goneCause) {
						t.Errorf("context.Cause = %v, want %v", cause, s.goneCause)
					}
				case <-time.After(confDeadline):
					t.Fatalf("context not cancelled %v after the client left (bound %v)", confDeadline, s.clientGone)
				}
			})
		}
	}
}

// TestConformanceClientGonePipelined: a pipelined request waiting behind a running
// handler is not a client leaving: the context stays live past the notice bound and
// both requests are answered.
func TestConformanceClientGonePipelined(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	for _, s := range confServers {
		t.Run(s.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Handler", "1")
				if r.URL.Path == "/wait" {
					select {
					case <-r.Context().Done():
						_, _ = io.WriteString(w, "cancelled")
						return
					case <-time.After(2 * h1ClientGone): // past h1's notice bound (net/http would cancel at once)
					}
				}
				_, _ = io.WriteString(w, "ok "+r.URL.Path)
			})
			srv := startConf(t, s.name, s.mk, confConfig{Handler: h})
			got := exchange(t, srv.addr, confExchange{writes: []string{req("GET", "/wait") + req("GET", "/next")}, finals: 2})
			want := []string{
				`HTTP/1.1 200 framing=length=8 Content-Type="text/plain; charset=utf-8" Date=set X-Handler="1" body="ok /wait"`,
				`HTTP/1.1 200 framing=length=8 Content-Type="text/plain; charset=utf-8" Date=set X-Handler="1" body="ok /next"`,
				"probe answered: " + `HTTP/1.1 200 framing=length=9 Content-Type="text/plain; charset=utf-8" Date=set X-Handler="1" body="ok /probe"`,
			}
			if strings.Join(got.lines, "\n") != strings.Join(want, "\n") {
				t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got.lines, "\n\t"), strings.Join(want, "\n\t"))
			}
		})
	}
}

// TestConformanceTimeouts: a silent connection is closed by the idle or header
// timeout within bounds, each server; what a server writes before closing (nothing,
// or a 400 for a partial request line) must be what net/http writes.
func TestConformanceTimeouts(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	const short, long = 200 * time.Millisecond, 2 * time.Second
	for _, tc := range []struct {
		name             string
		idle, readHeader time.Duration
		send             string // before the silence; a full GET first is answered first
		min, max         time.Duration
		only, why        string // a server this row is for alone, and why
	}{
		{"idle-after-request", short, 0, get, short / 2, long, "", ""},
		{"idle-after-request-readheader-shorter", short, short / 4, get, short / 2, long, "", ""},
		{"partial-header", long * 4, short, "GET / HTTP/1.1\r\nHost: a\r\n", short / 2, long, "", ""},
		{"partial-request-line", long * 4, short, "GET / HT", short / 2, long, "", ""},
		{"partial-second-request", long * 4, short, get + "GET / HT", short / 2, long, "", ""},
		{"silent-new-connection", long * 4, short, "", short / 2, long, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wrote []string
			for _, s := range confServers {
				if tc.only != "" && tc.only != s.name {
					continue
				}
				srv := startConf(t, s.name, s.mk, confConfig{Handler: http.HandlerFunc(confHandler),
					IdleTimeout: tc.idle, ReadHeaderTimeout: tc.readHeader})
				c := dialConf(t, srv.addr)
				br := bufio.NewReader(c)
				if tc.send != "" {
					if _, err := io.WriteString(c, tc.send); err != nil {
						t.Fatal(err)
					}
				}
				if strings.HasPrefix(tc.send, get) {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
				}
				b, d := readUntilClosed(t, c, br)
				if d < tc.min || d > tc.max {
					t.Errorf("%s: closed after %v, want within [%v, %v]", s.name, d, tc.min, tc.max)
				}
				wrote = append(wrote, reduce(b))
			}
			if len(wrote) == 2 && wrote[0] != wrote[1] {
				t.Errorf("before the close net/http wrote %s, h1 wrote %s", wrote[0], wrote[1])
			}
		})
	}
}

// TestConformanceIdleZero: IdleTimeout zero bounds no idle wait on either server, even
// with a ReadHeaderTimeout (net/http without a ReadTimeout; h1's Server.IdleTimeout
// doc): a kept-alive connection silent for several header timeouts still serves the
// next request.
func TestConformanceIdleZero(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	const readHeader = 100 * time.Millisecond
	for _, s := range confServers {
		t.Run(s.name, func(t *testing.T) {
			srv := startConf(t, s.name, s.mk, confConfig{Handler: http.HandlerFunc(confHandler), ReadHeaderTimeout: readHeader})
			c := dialConf(t, srv.addr)
			br := bufio.NewReader(c)
			for i := range 2 {
				if i == 1 {
					// Silent for 4 header timeouts: a read that would see the close sees
					// nothing until its own deadline instead.
					_ = c.SetReadDeadline(time.Now().Add(4 * readHeader))
					if _, err := br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatalf("%s: idle connection read = %v, want the test's own deadline (closed by an idle bound?)", s.name, err)
					}
					_ = c.SetReadDeadline(time.Now().Add(confDeadline))
				}
				if _, err := io.WriteString(c, get); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%s: request %d after the idle wait: %v", s.name, i+1, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: request %d: status %d", s.name, i+1, resp.StatusCode)
				}
			}
		})
	}
}

// reduce describes the answers in b (each as describe does), or says "nothing".
func reduce(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	br := bufio.NewReader(bytes.NewReader(b))
	var out []string
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				out = append(out, "unparsable: "+readErr(err))
			}
			return strings.Join(out, "; ")
		}
		out = append(out, describe(resp))
	}
}

// TestConformancePanicLog: a handler panic is logged to ErrorLog with its value and a
// stack; panic(http.ErrAbortHandler) is not logged; each server alike.
func TestConformancePanicLog(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	for _, s := range confServers {
		for _, tc := range []struct {
			path   string
			logged bool
		}{{"/panic", true}, {"/abort", false}, {"/panic-after-flush", true}} {
			t.Run(s.name+tc.path, func(t *testing.T) {
				srv := startConf(t, s.name, s.mk, confConfig{Handler: http.HandlerFunc(confHandler)})
				c := dialConf(t, srv.addr)
				if _, err := io.WriteString(c, req("GET", tc.path)); err != nil {
					t.Fatal(err)
				}
				readUntilClosed(t, c, c) // the server closes after the panic: the log is written by then
				log := srv.log.String()
				if got := strings.Contains(log, "conformance: handler panic") && strings.Contains(log, "goroutine "); got != tc.logged {
					t.Errorf("panic value and stack logged: %v, want %v; log:\n%s", got, tc.logged, log)
				}
				if !tc.logged && log != "" {
					t.Errorf("log %q, want nothing", log)
				}
			})
		}
	}
}
