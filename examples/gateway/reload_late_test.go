package gateway_test

import (
	"fmt"
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

// pinned starts a turn of session on g whose body has not arrived: when it returns, the
// request has pinned its routing snapshot and waits in its body's read. finish sends the
// body and returns the response.
func pinned(t *testing.T, g *gateway.Gateway, session string) (finish func() *httptest.ResponseRecorder) {
	t.Helper()
	pr, pw := io.Pipe()
	body := &firstRead{Reader: pr, reading: make(chan struct{})}
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", body)
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { defer close(done); g.ServeHTTP(rec, req) }()
	<-body.reading
	return func() *httptest.ResponseRecorder {
		_, _ = io.Copy(pw, strings.NewReader(`{"model":"m"}`))
		require.NoError(t, pw.Close())
		<-done
		return rec
	}
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
				finish := pinned(t, g, sess)
				for _, cfg := range tt.reloads {
					require.NoError(t, g.Reload(cfg))
				}
				rec := finish()
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

// A session whose backend a reload removed, rebound by a request that started before a
// second reload that builds a new Scheduler (which copied the old binding, to the
// removed backend), keeps the new binding: its next turn is a hit where the rebind
// went (tester48: the copied binding stayed, so the next turn was rebound again, often
// to another backend).
func TestReloadKeepsRebindOfRequestInFlight(t *testing.T) {
	urls := jsonBackends(t, 3)
	ids := []string{"b0", "b1", "b2"}
	all := yamlConfig(t, urls, ids, []float64{1, 1, 1}, "")
	for _, gone := range ids {
		t.Run("without "+gone, func(t *testing.T) {
			var keepURLs, keepIDs []string
			for i, id := range ids {
				if id != gone {
					keepURLs, keepIDs = append(keepURLs, urls[i]), append(keepIDs, id)
				}
			}
			without := yamlConfig(t, keepURLs, keepIDs, []float64{1, 1}, "")
			rebuilt := yamlConfig(t, keepURLs, keepIDs, []float64{1, 1}, "affinity: {sticky_ttl_seconds: 900}\n")
			g, err := gateway.New(all)
			require.NoError(t, err)
			t.Cleanup(g.Close)
			var sessions []string // bound to gone
			for i := 0; len(sessions) < 4; i++ {
				require.Less(t, i, 400, "HRW put no session on %s", gone)
				s := fmt.Sprintf("rb-%s-%d", gone, i)
				if send(t, g, s).Header().Get(gateway.HeaderBackend) == gone {
					sessions = append(sessions, s)
				}
			}
			require.NoError(t, g.Reload(without)) // no new Scheduler: the bindings to gone stay
			for _, sess := range sessions {
				finish := pinned(t, g, sess)
				require.NoError(t, g.Reload(rebuilt)) // copies the binding to gone
				rec := finish()
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				require.Equal(t, "rebind", rec.Header().Get(gateway.HeaderOutcome), sess)
				moved := rec.Header().Get(gateway.HeaderBackend)

				next := send(t, g, sess)
				assert.Equal(t, "hit", next.Header().Get(gateway.HeaderOutcome), "%s: the turn after the rebind", sess)
				assert.Equal(t, moved, next.Header().Get(gateway.HeaderBackend), "%s: stays where the rebind put it", sess)
				require.NoError(t, g.Reload(without)) // for the next session: a new Scheduler again
			}
		})
	}
}
