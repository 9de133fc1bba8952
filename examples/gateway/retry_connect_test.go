package gateway_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// deadURL is the URL of a loopback port nothing listens on (a dial is refused).
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

// sessionRanked returns a session ID whose HRW ranking of ids is want (a prefix of it).
func sessionRanked(t *testing.T, ids []string, want ...string) string {
	t.Helper()
	for i := range 100000 {
		sid := fmt.Sprintf("s%d", i)
		if r := ranking(t, sid, ids); strings.Join(r[:len(want)], ",") == strings.Join(want, ",") {
			return sid
		}
	}
	t.Fatalf("no session ranks %v first", want)
	return ""
}

// tester38 finding 4: a request whose session ranks two dead backends (not yet Down)
// first and second, and a live one third, is answered by the live one: after a connect
// failure that sent nothing, the retry goes on to a third backend, none tried before —
// whether the failures eject the dead backends (the session is placed again without
// them) or not (the binding stays), or only the second (the session's binding to the
// first, not ejected, is not taken back). Three backends at most: with three dead ones
// ranked first, the client gets the 502 after two retries. (Before: one retry only, so a
// 502 whenever the retry landed on a dead backend too.)
func TestRetryConnectErrorThirdBackend(t *testing.T) {
	ids := []string{"d1", "d2", "d3", "live"}
	tests := []struct {
		name      string
		outliers  string
		prime     bool     // a failure of d2 before, with threshold 2: only d2's failure ejects
		rank      []string // the session's ranking (prefix)
		want      int
		wantRetry int      // "retrying request" lines of the session's request
		wantDown  []string // ejected afterwards
	}{
		{"no ejection", "{consecutive_connect_failures: 5}", false, []string{"d1", "d2", "live"}, 200, 2, nil},
		{"each failure ejects", "{consecutive_connect_failures: 1, max_ejection_percent: 100}", false, []string{"d1", "d2", "live"}, 200, 2, []string{"d1", "d2"}},
		{"only the second ejects", "{consecutive_connect_failures: 2, max_ejection_percent: 100}", true, []string{"d1", "d2", "live"}, 200, 2, []string{"d2"}},
		{"three dead first: bounded", "{consecutive_connect_failures: 5}", false, []string{"d1", "d2", "d3", "live"}, 502, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int64
			live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"ok":true}`))
			}))
			t.Cleanup(live.Close)
			urls := []string{deadURL(t), deadURL(t), deadURL(t), live.URL}
			logger, logs := captureLogs()
			g, err := gateway.New(yamlConfig(t, urls, ids, []float64{1, 1, 1, 1},
				"health: {enabled: false}\noutlier_detection: "+tt.outliers+"\n"), gateway.WithLogger(logger))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			if tt.prime { // d2 fails once, then the request goes on to live
				rec := send(t, g, sessionRanked(t, ids, "d2", "live"))
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				require.Empty(t, g.PassivelyDown())
			}
			before := strings.Count(logs.String(), `"msg":"retrying request"`)
			rec := send(t, g, sessionRanked(t, ids, tt.rank...))
			assert.Equal(t, tt.want, rec.Code, rec.Body.String())
			if tt.want == http.StatusOK {
				assert.Equal(t, "live", rec.Header().Get(gateway.HeaderBackend))
			}
			assert.Equal(t, tt.wantRetry, strings.Count(logs.String(), `"msg":"retrying request"`)-before, logs.String())
			assert.ElementsMatch(t, tt.wantDown, g.PassivelyDown())
			reqs, bytes := g.InFlight()
			assert.Zero(t, reqs+bytes)
		})
	}
}
