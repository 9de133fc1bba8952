package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// firstRead signals on its channel when its reader is first read: the request has
// pinned its routing snapshot and is reading its body.
type firstRead struct {
	io.Reader
	reading chan struct{}
	once    bool
}

func (f *firstRead) Read(p []byte) (int, error) {
	if !f.once {
		f.once = true
		close(f.reading)
	}
	return f.Reader.Read(p)
}

// A first turn whose request started before a reload that builds a new Scheduler, and
// that is placed after the reload copied the table (here: its body arrives after the
// reload), keeps its binding: the next turn is a hit on the same backend (tester46: a
// miss, and with the weights changed in the same reload, a move). Two reloads in a row
// (the binding is forwarded along the chain), and one that also changes weights.
func TestReloadKeepsBindingsOfRequestsInFlight(t *testing.T) {
	urls := jsonBackends(t, 3)
	ids := []string{"b0", "b1", "b2"}
	tests := []struct {
		name    string
		reloads []gateway.Config
	}{
		{"ttl", []gateway.Config{
			yamlConfig(t, urls, ids, []float64{1, 1, 1}, "affinity: {sticky_ttl_seconds: 900}\n"),
		}},
		{"ttl and weights", []gateway.Config{
			yamlConfig(t, urls, ids, []float64{1, 1, 50}, "affinity: {sticky_ttl_seconds: 900}\n"),
		}},
		{"two reloads", []gateway.Config{
			yamlConfig(t, urls, ids, []float64{1, 1, 1}, "affinity: {sticky_ttl_seconds: 900}\n"),
			yamlConfig(t, urls, ids, []float64{50, 1, 1}, "affinity: {sticky_ttl_seconds: 800}\n"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := yamlConfig(t, urls, ids, []float64{1, 1, 1}, "")
			g, err := gateway.New(base)
			require.NoError(t, err)
			t.Cleanup(g.Close)
			for _, sess := range []string{"late-a", "late-b", "late-c", "late-d", "late-e", "late-f"} {
				pr, pw := io.Pipe()
				body := &firstRead{Reader: pr, reading: make(chan struct{})}
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", body)
				req.ContentLength = -1
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Session-ID", sess)
				rec := httptest.NewRecorder()
				done := make(chan struct{})
				go func() { defer close(done); g.ServeHTTP(rec, req) }()
				<-body.reading
				for _, cfg := range tt.reloads {
					require.NoError(t, g.Reload(cfg))
				}
				_, _ = io.Copy(pw, strings.NewReader(`{"model":"m"}`))
				require.NoError(t, pw.Close())
				<-done
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				first := rec.Header().Get(gateway.HeaderBackend)
				assert.Equal(t, "miss", rec.Header().Get(gateway.HeaderOutcome), "%s: first turn", sess)

				next := send(t, g, sess)
				assert.Equal(t, "hit", next.Header().Get(gateway.HeaderOutcome), "%s: the second turn finds the first turn's binding", sess)
				assert.Equal(t, first, next.Header().Get(gateway.HeaderBackend), "%s: and stays on its backend", sess)
				b, ok := g.Scheduler().Lookup(sess, "")
				require.True(t, ok, sess)
				assert.Equal(t, first, b, sess)
				require.NoError(t, g.Reload(base)) // for the next session's reloads
			}
		})
	}
}
