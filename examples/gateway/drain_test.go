package gateway_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A stream still running when the shutdown drain ends is logged as cut by the drain, not
// as a client that went away; the drain ends at drain_seconds, or at once on
// Gateway.EndDrain (the command's second SIGINT/SIGTERM) even with an hour left. (Before:
// "client went away mid-response", and nothing ended the drain early.)
func TestShutdownDrainCutsAndEndsEarly(t *testing.T) {
	tests := []struct {
		name     string
		drain    string
		endDrain bool
		wantWarn string
	}{
		{"drain_seconds over", "0.05", false, "drain timeout: closing the remaining connections"},
		{"EndDrain with an hour left", "3600", true, "drain ended early: closing the remaining connections"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				streaming := make(chan struct{}, 1)
				backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, "data: {}\n\n")
					w.(http.Flusher).Flush()
					streaming <- struct{}{}
					<-r.Context().Done() // until the gateway closes the connection
				}))
				t.Cleanup(backend.Close)
				logs := &records{}
				g, err := gateway.New(yamlConfig(t, []string{backend.URL}, []string{"b0"}, []float64{1},
					"server: "+server+"\nhealth: {enabled: false}\ndrain_seconds: "+tt.drain+"\n"), gateway.WithLogger(slog.New(logs)))
				require.NoError(t, err)
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- g.Serve(ctx, ln) }()

				req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/chat/completions",
					strings.NewReader(`{"model":"m","stream":true}`))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Session-ID", "s1")
				client := &http.Client{}
				resp, err := client.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				line, err := bufio.NewReader(resp.Body).ReadString('\n')
				require.NoError(t, err)
				require.Equal(t, "data: {}\n", line)
				<-streaming

				cancel() // the first signal: the drain begins
				if tt.endDrain {
					g.EndDrain() // the second
				}
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-time.After(10 * time.Second):
					t.Fatal("Serve did not return: the drain was not ended")
				}
				_, err = io.ReadAll(resp.Body)
				require.Error(t, err, "the stream was cut")
				require.Eventually(t, func() bool { return logs.has("request cut by the shutdown drain") },
					10*time.Second, time.Millisecond)
				assert.False(t, logs.has("client went away mid-response"))
				assert.Contains(t, logs.warnings(), tt.wantWarn)
			})
		})
	}
}

// has reports whether a record with message msg was logged.
func (h *records) has(msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message == msg {
			return true
		}
	}
	return false
}
