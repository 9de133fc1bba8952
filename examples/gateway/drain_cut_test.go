package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// drainGateway serves a gateway over backend (b0) on a loopback listener with Serve, the
// config's extra YAML added; it returns the gateway, its address, the function that
// begins the drain (the first signal) and Serve's result.
func drainGateway(t *testing.T, backend, extra string, logs slog.Handler) (*gateway.Gateway, string, func(), <-chan error) {
	t.Helper()
	g, err := gateway.New(yamlConfig(t, []string{backend}, []string{"b0"}, []float64{1}, "health: {enabled: false}\n"+extra),
		gateway.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	return g, ln.Addr().String(), cancel, done
}

// streamRequest is a streamed chat completion of session sid to the gateway at addr.
func streamRequest(t *testing.T, addr, sid string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", sid)
	return req
}

// awaitServe waits for Serve's result (10 s at most).
func awaitServe(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// An event stream still running when the shutdown drain ends (drain_seconds, or
// EndDrain) gets the error event with code "shutdown" before its connection is closed,
// whether its headers went out before the shutdown began or after (then with
// Connection: close: Node's fetch takes the close for the end of the body, and the
// OpenAI SDK saw a stream that ended well), with stream_usage on too; the client then
// sees the transport error, the cut is logged as the drain's, and counted
// client_closed. (Before: the connection was closed with no event.)
func TestDrainCutStreamErrorEvent(t *testing.T) {
	tests := []struct {
		name     string
		after    bool // the backend's headers go out after the shutdown began
		drain    string
		endDrain bool
		extra    string
	}{
		{"headers before the shutdown, EndDrain", false, "3600", true, ""},
		{"headers after the shutdown began, EndDrain", true, "3600", true, ""},
		{"headers before the shutdown, drain_seconds", false, "0.05", false, ""},
		{"headers after the shutdown began, stream_usage", true, "3600", true, "stream_usage: true\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				got, release := make(chan struct{}, 1), make(chan struct{})
				backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					got <- struct{}{}
					<-release
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, "data: {}\n\n")
					w.(http.Flusher).Flush()
					<-r.Context().Done() // until the gateway closes the connection
				}))
				t.Cleanup(backend.Close)
				logs := &records{}
				g, addr, shutdown, done := drainGateway(t, backend.URL, "server: "+server+"\n"+"drain_seconds: "+tt.drain+"\n"+tt.extra, logs)

				type result struct {
					resp *http.Response
					err  error
				}
				res, req := make(chan result, 1), streamRequest(t, addr, "s1")
				go func() {
					resp, err := (&http.Client{}).Do(req)
					res <- result{resp, err}
				}()
				<-got
				if !tt.after {
					close(release)
				}
				r := result{}
				if !tt.after {
					r = <-res
				}
				shutdown()
				if tt.after {
					require.Eventually(t, func() bool { // the listener is closed: Shutdown has begun
						c, err := net.Dial("tcp", addr)
						if err == nil {
							_ = c.Close()
						}
						return err != nil
					}, 10*time.Second, time.Millisecond)
					close(release)
					r = <-res
				}
				require.NoError(t, r.err)
				defer r.resp.Body.Close()
				require.Equal(t, http.StatusOK, r.resp.StatusCode)
				assert.Equal(t, tt.after, r.resp.Close, "Connection: close on a response begun during the drain")
				if tt.endDrain {
					g.EndDrain()
				}
				awaitServe(t, done)

				body, err := io.ReadAll(r.resp.Body)
				require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the stream is cut: no last chunk")
				before, code, msg := splitErrorEvent(t, string(body))
				assert.Equal(t, "data: {}\n\n", before)
				assert.Equal(t, "shutdown", code)
				assert.NotContains(t, msg, "127.0.0.1")
				assert.Equal(t, 1, logs.count("request cut by the shutdown drain"), "logged before Serve returned")
				assert.Zero(t, logs.count("client went away mid-response"))
				assert.Equal(t, map[string]float64{"client_closed/backend": 1}, requestsByClass(t, g))
				assert.Zero(t, g.Scheduler().Load("b0").Requests, "the lease released")
			})
		})
	}
}

// count returns how many records with message msg were logged.
func (h *records) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Message == msg {
			n++
		}
	}
	return n
}

// slowCuts is a records handler that hands each "request cut by the shutdown drain"
// record on only once the drain's end was logged, and then after yielding the
// processor many times: a slow log sink, whose cut records come after Serve's own.
type slowCuts struct {
	*records
	ended chan struct{} // closed when the drain's end is logged
}

func (h *slowCuts) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case "request cut by the shutdown drain":
		<-h.ended
		for range 1000 {
			runtime.Gosched()
		}
	case "drain ended early: closing the remaining connections":
		defer close(h.ended)
	}
	return h.records.Handle(ctx, r)
}

// Every request cut by the drain is logged before Serve returns — the command exits once
// it has — even when the log sink is slower than Serve's own way out: Serve waits (1 s
// at most) for the cut handlers to return. (Before: Serve returned with cut handlers
// still running; tester29 saw 5 "request cut" lines for 8 cut streams.)
func TestDrainLogsEveryCutBeforeServeReturns(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		const streams = 8
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}))
		t.Cleanup(backend.Close)
		logs := &slowCuts{records: &records{}, ended: make(chan struct{})}
		g, addr, shutdown, done := drainGateway(t, backend.URL, "server: "+server+"\n"+"drain_seconds: 3600\n", logs)
		bodies := make([]io.ReadCloser, 0, streams)
		for i := range streams {
			resp, err := (&http.Client{}).Do(streamRequest(t, addr, "s"+strconv.Itoa(i)))
			require.NoError(t, err)
			bodies = append(bodies, resp.Body)
		}
		shutdown()
		g.EndDrain()
		awaitServe(t, done)
		assert.Equal(t, streams, logs.count("request cut by the shutdown drain"), "every cut logged before Serve returned")
		for _, b := range bodies {
			_, err := io.ReadAll(b)
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
			_ = b.Close()
		}
	})
}
