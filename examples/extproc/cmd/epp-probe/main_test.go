package main

import (
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/agentserve/sessionaffinity/examples/extproc"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestProbe(t *testing.T) {
	cfg, err := gateway.ParseConfig([]byte("backends:\n  - {id: b0, url: \"http://10.0.0.1:8000\"}\n  - {id: b1, url: \"http://10.0.0.2:8000\"}\n"))
	require.NoError(t, err)
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	defer g.Close()
	srv, err := extproc.New(g)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	var out strings.Builder
	require.NoError(t, run(&out, lis.Addr().String(), "s1", `{"model":"m"}`, 3))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[0], "affinity_hit=false")
	ep := strings.Fields(lines[0])[2]
	for _, l := range lines[1:] {
		assert.Contains(t, l, "affinity_hit=true")
		assert.Equal(t, ep, strings.Fields(l)[2], "same endpoint every turn")
	}
	out.Reset()
	require.NoError(t, run(&out, lis.Addr().String(), "s1", `{"model":`, 1))
	assert.Contains(t, out.String(), "immediate response 400")
}
