package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The command starts on free loopback ports with a config file, answers gRPC health and
// /metrics, and returns nil once its context is cancelled.
func TestRun(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n"), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-config", cfg, "-grpc", "127.0.0.1:0", "-metrics", "127.0.0.1:0"}, io.Discard,
			func(g, m string) { addrs <- [2]string{g, m} })
	}()
	a := <-addrs

	conn, err := grpc.NewClient(a[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.GetStatus())
	require.NoError(t, conn.Close())

	resp, err := http.Get("http://" + a[1] + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.True(t, strings.Contains(string(body), "agentserve_extproc_inflight_requests 0"), string(body))
	http.DefaultClient.CloseIdleConnections()

	cancel()
	assert.NoError(t, <-done)
}

func TestRunBadConfig(t *testing.T) {
	err := run(context.Background(), []string{"-config", filepath.Join(t.TempDir(), "missing.yaml")}, io.Discard, nil)
	assert.ErrorIs(t, err, os.ErrNotExist)
}
