package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// /readyz under Serve: 503 "starting" while the binding snapshot loads and 503
// "draining" once the drain has begun, whatever the backends; otherwise the backends
// decide. Every answer lists them.
func TestReadyzPhases(t *testing.T) {
	g, err := New(Config{Backends: []BackendConfig{{ID: "b0", URL: "http://127.0.0.1:1"}}, Health: HealthConfig{Enabled: new(false)}})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	for _, tt := range []struct {
		phase  int32
		code   int
		status string
	}{
		{phaseServing, http.StatusOK, "ready"},
		{phaseStarting, http.StatusServiceUnavailable, "starting"},
		{phaseDraining, http.StatusServiceUnavailable, "draining"},
	} {
		t.Run(tt.status, func(t *testing.T) {
			g.phase.Store(tt.phase)
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			assert.Equal(t, tt.code, rec.Code)
			var body struct {
				Status   string
				Backends map[string]string
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			assert.Equal(t, tt.status, body.Status)
			assert.Equal(t, map[string]string{"b0": "healthy"}, body.Backends)
		})
	}
}
