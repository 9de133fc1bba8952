package gateway_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A request still waiting for its backend's response headers when the shutdown drain
// ends (drain_seconds, or EndDrain) is answered a JSON 503 "shutdown" with Retry-After,
// streamed or not, instead of a closed connection: an SDK raises its typed error and
// retries. So is one whose JSON body the gateway is still reading whole to add
// x_agent_serve (its client has received nothing yet; tester33: an empty reply). It is
// not retried on another backend, not counted against its backend (outlier detection),
// logged once as the drain's cut, and its lease is released. (Before: the connection was
// closed with no response at all.)
func TestDrainCutPendingRequest(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		drain    string
		endDrain bool
		partial  bool // the backend sends its headers and part of a JSON body, then waits
	}{
		{"JSON, EndDrain", `{"model":"m"}`, "3600", true, false},
		{"stream, EndDrain", `{"model":"m","stream":true}`, "3600", true, false},
		{"JSON, drain_seconds", `{"model":"m"}`, "0.05", false, false},
		{"JSON body begun, EndDrain", `{"model":"m"}`, "3600", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				var hits atomic.Int64
				waiting := make(chan struct{}, 4)
				backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					_, _ = io.Copy(io.Discard, r.Body) // then net/http notices the gateway closing the connection
					if tt.partial {
						w.Header().Set("Content-Type", "application/json")
						w.Header().Set("Content-Length", "1000")
						_, _ = io.WriteString(w, `{"id":"chatcmpl-1",`)
						w.(http.Flusher).Flush()
					}
					waiting <- struct{}{}
					<-r.Context().Done() // never answers (in full): until the gateway gives up the attempt
				}))
				t.Cleanup(backend.Close)
				logs := &records{}
				g, addr, shutdown, done := drainGateway(t, backend.URL, "server: "+server+"\n"+
					"drain_seconds: "+tt.drain+"\nlimits: {retry_after_seconds: 2}\noutlier_detection: {consecutive_connect_failures: 1}\n", logs)

				res := postAsync(t, addr, tt.body)
				<-waiting
				if tt.partial { // the gateway reserved the buffer (2 x Content-Length): it is reading the body
					require.Eventually(t, func() bool { _, b := g.InFlight(); return b >= 2000 }, 10*time.Second, time.Millisecond)
				}
				shutdown()
				if tt.endDrain {
					g.EndDrain()
				}
				r := <-res
				require.NoError(t, r.err, "an answer, not a closed connection")
				body, err := io.ReadAll(r.resp.Body)
				require.NoError(t, err)
				_ = r.resp.Body.Close()
				awaitServe(t, done)

				assert.Equal(t, http.StatusServiceUnavailable, r.resp.StatusCode)
				assert.Equal(t, "2", r.resp.Header.Get("Retry-After"))
				assert.Equal(t, "shutdown", errorCodeOf(t, string(body)))
				assert.NotContains(t, string(body), "127.0.0.1")
				assert.Equal(t, int64(1), hits.Load(), "not retried on another attempt")
				assert.Equal(t, 1, logs.count("request cut by the shutdown drain"))
				assert.Zero(t, logs.count("backend request failed"), "not the backend's failure")
				assert.Zero(t, logs.count("backend state change")+logs.count("backend not ejected: max_ejection_percent reached"),
					"not counted for outlier detection (one failure would eject)")
				assert.Zero(t, g.Scheduler().Load("b0").Requests, "the lease released")
				assert.Equal(t, map[string]float64{"5xx/gateway": 1}, requestsByClass(t, g), "a 503 of the gateway's")
			})
		})
	}
}

// result is the outcome of a request sent by postAsync.
type result struct {
	resp *http.Response
	err  error
}

// postAsync posts body as session s1's chat completion to the gateway at addr from
// another goroutine; the result arrives on the channel.
func postAsync(t *testing.T, addr, body string) <-chan result {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", "s1")
	res := make(chan result, 1)
	go func() {
		resp, err := (&http.Client{}).Do(req)
		res <- result{resp, err}
	}()
	return res
}

// errAcceptFailed is failingListener's Accept error once it failed.
var errAcceptFailed = errors.New("accept failed")

// failingListener is a listener whose Accept fails for good (an error that is not
// temporary) once fail is called.
type failingListener struct {
	net.Listener
	failed chan struct{}
}

func (l *failingListener) fail() {
	close(l.failed)
	_ = l.Listener.Close() // unblocks the Accept waiting
}

func (l *failingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	select {
	case <-l.failed:
		if c != nil {
			_ = c.Close()
		}
		return nil, errAcceptFailed
	default:
	}
	return c, err
}

// When the listener fails, Serve drains the requests in flight as on a shutdown before
// it returns the listener's error: a request waiting for its backend gets its answer.
// (Before: Serve returned at once, and the command exited with the request unanswered.)
func TestListenerFailureDrains(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		waiting, release := make(chan struct{}, 1), make(chan struct{})
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			waiting <- struct{}{}
			<-release
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"1"}`)
		}))
		t.Cleanup(backend.Close)
		var once sync.Once
		answer := func() { once.Do(func() { close(release) }) }
		t.Cleanup(answer) // first: a failed test does not leave the backend waiting
		logs := &records{}
		g, err := gateway.New(yamlConfig(t, []string{backend.URL}, []string{"b0"}, []float64{1}, "server: "+server+"\n"+
			"health: {enabled: false}\ndrain_seconds: 3600\n"), gateway.WithLogger(slog.New(logs)))
		require.NoError(t, err)
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ln := &failingListener{Listener: inner, failed: make(chan struct{})}
		done := make(chan error, 1)
		go func() { done <- g.Serve(context.Background(), ln) }()

		res := postAsync(t, inner.Addr().String(), `{"model":"m"}`)
		<-waiting
		ln.fail()
		require.Eventually(t, func() bool { return logs.has("listener failed: no new connections; draining the requests in flight") },
			10*time.Second, time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("Serve returned with a request in flight: %v", err)
		default:
		}
		answer()
		r := <-res
		require.NoError(t, r.err)
		body, err := io.ReadAll(r.resp.Body)
		require.NoError(t, err)
		_ = r.resp.Body.Close()
		assert.Equal(t, http.StatusOK, r.resp.StatusCode)
		assert.JSONEq(t, `{"id":"1","x_agent_serve":{"backend":"b0","affinity_hit":false,"tier":""}}`, string(body))
		select {
		case err := <-done:
			require.ErrorIs(t, err, errAcceptFailed)
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return")
		}
	})
}

// A JSON body copied through (inject_metadata off) that the drain's end cuts is cut
// short for its client, as documented, and like a cut stream it is logged as the drain's
// cut and counted client_closed. (Before: no log line, and counted 2xx: tester35.)
func TestDrainCutCopiedBody(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		const sent, length = 70000, 100000
		waiting := make(chan struct{}, 1)
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(length))
			_, _ = io.WriteString(w, `{"id":"`+strings.Repeat("a", sent-7))
			w.(http.Flusher).Flush()
			waiting <- struct{}{}
			<-r.Context().Done()
		}))
		t.Cleanup(backend.Close)
		logs := &records{}
		g, addr, shutdown, done := drainGateway(t, backend.URL, "server: "+server+"\n"+"drain_seconds: 3600\ninject_metadata: false\n", logs)
		r := <-postAsync(t, addr, `{"model":"m"}`)
		require.NoError(t, r.err)
		defer r.resp.Body.Close()
		<-waiting
		// The gateway is copying the body (all but what its response buffer may still hold).
		_, err := io.ReadFull(r.resp.Body, make([]byte, sent-8<<10))
		require.NoError(t, err)
		shutdown()
		g.EndDrain()
		_, err = io.ReadAll(r.resp.Body)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "cut short")
		awaitServe(t, done)
		assert.Equal(t, 1, logs.count("request cut by the shutdown drain"))
		assert.Equal(t, map[string]float64{"client_closed/backend": 1}, requestsByClass(t, g))
		assert.Zero(t, g.Scheduler().Load("b0").Requests, "the lease released")
	})
}
