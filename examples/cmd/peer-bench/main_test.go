package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPeerConfigsHashOnTheSessionHeader(t *testing.T) {
	bs := []*backendSrv{{id: "b0", addr: "127.0.0.1:9001"}, {id: "b1", addr: "127.0.0.1:9002"}}
	hap := haproxyConfig(8080, bs)
	for _, want := range []string{"balance hdr(X-Session-ID)", "hash-type consistent", "bind 127.0.0.1:8080",
		"server b0 127.0.0.1:9001", "server b1 127.0.0.1:9002"} {
		assert.Contains(t, hap, want)
	}
	ngx := nginxConfig("/tmp/x", 8080, bs)
	for _, want := range []string{"hash $http_x_session_id consistent;", "listen 127.0.0.1:8080;",
		"server 127.0.0.1:9001 ", "proxy_next_upstream error timeout;"} {
		assert.Contains(t, ngx, want)
	}
	gw := gatewayConfig(8080, bs)
	assert.Contains(t, gw, "listen: 127.0.0.1:8080")
	assert.Contains(t, gw, `{id: b1, url: "http://127.0.0.1:9002"}`)
	assert.Contains(t, gw, "server: direct\n", "-gateway-server's default")
}

func TestSummarizeAndPercentile(t *testing.T) {
	ms := time.Millisecond
	res := [][]turnResult{
		{{turn: 0, ok: true, lat: 10 * ms}, {turn: 1, ok: true, cached: 16, lat: 2 * ms}, {turn: 2, ok: true, lat: 9 * ms}},
		{{turn: 0, ok: true, lat: 11 * ms}, {turn: 1, ok: false}, {turn: 2, ok: true, cached: 32, lat: 3 * ms}},
	}
	s := summarize(res, 0, -1)
	assert.Equal(t, 1, s.errors)
	assert.Equal(t, 1, s.cold, "turn 2 of session 0 had nothing cached")
	assert.InDelta(t, 2.0/3, s.warmRate, 1e-9)
	assert.Equal(t, 11*ms, s.p99)
	assert.Equal(t, 9*ms, percentile([]time.Duration{2 * ms, 3 * ms, 9 * ms, 10 * ms, 11 * ms}, 60))
	assert.Equal(t, summary{}.p99, percentile(nil, 99))
}

func TestTablePrintsRatios(t *testing.T) {
	tab := newTable([]string{"gateway", "haproxy", "nginx"})
	tab.set("gateway", "cpu", us(120*time.Microsecond), false)
	tab.set("haproxy", "cpu", us(40*time.Microsecond), false)
	tab.set("nginx", "cpu", us(60*time.Microsecond), false)
	tab.set("gateway", "errors", count(0), false)
	tab.set("haproxy", "errors", count(0), false)
	tab.set("nginx", "errors", count(2), false)
	tab.set("gateway", "placed", placed(10), true)
	tab.set("haproxy", "placed", placed(14), true)
	tab.set("nginx", "placed", placed(5), true)
	var out bytes.Buffer
	tab.print(&out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 5)
	assert.Equal(t, "| cpu | 120 µs | 40 µs | 60 µs | 3.00x | 2.00x |", lines[2])
	assert.Equal(t, "| errors | 0 | 0 | 2 | = | 0.00x |", lines[3])
	assert.Equal(t, "| placed | 10 | 14 | 5 | n/a | n/a |", lines[4], "a figure of the run, not of the proxy: no ratio")
}

func TestCPUTicksOfThisProcess(t *testing.T) {
	n, err := statTicks(os.Getpid())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, uint64(0))
	_, err = statTicks(-1)
	assert.Error(t, err)
}

// A killed backend refuses connections; restarted, it serves again with an empty cache.
func TestBackendKillAndRestart(t *testing.T) {
	b, err := startBackend("b0", fakevllm.Config{})
	require.NoError(t, err)
	defer b.kill()
	get := func() error {
		resp, err := newClient(1).Get(b.url() + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	require.NoError(t, get())
	old := b.sim
	b.kill()
	require.Error(t, get())
	require.NoError(t, b.restart())
	require.NoError(t, get())
	assert.NotSame(t, old, b.sim, "a restarted backend has a fresh simulator (cold cache)")
}

func TestThreadCounterParsers(t *testing.T) {
	status := "Name:\tgateway\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t7\n"
	tests := []struct {
		name      string
		status    string
		schedstat string
		switches  uint64
		cpu       time.Duration
	}{
		{"both fields", status, "123456789 1000 42\n", 157, 123456789 * time.Nanosecond},
		{"missing fields, empty schedstat", "Name:\tx\n", "", 0, 0},
		{"only voluntary", "voluntary_ctxt_switches:\t3\n", "5 0 0", 3, 5 * time.Nanosecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.switches, parseSwitches(tt.status))
			assert.Equal(t, tt.cpu, parseSchedstat(tt.schedstat))
		})
	}
}
