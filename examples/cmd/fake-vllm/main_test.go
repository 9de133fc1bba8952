package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesAndShutsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-id", "b9", "-time-scale", "0.001"}, &logs) }()

	addrRE := regexp.MustCompile(`addr=(\S+)`)
	var addr string
	require.Eventually(t, func() bool {
		m := addrRE.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 5*time.Second, time.Millisecond)

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + addr + "/health")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "b9", resp.Header.Get("X-Fakevllm-Backend"))
	client.CloseIdleConnections()

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	assert.Contains(t, logs.String(), "SIMULATOR")
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-cache-blocks", "-1"},
		{"-time-scale", "nope"},
		{"extra"},
	} {
		err := run(context.Background(), args, io.Discard)
		assert.Error(t, err, "%v", args)
	}
}

// Zero-valued numeric flags are refused with the flag named (they would silently take
// the default); errors print the command's name once; -h names the command.
func TestRunFlagErrorsNameTheFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string // errorLine of the error
	}{
		{[]string{"-max-concurrent", "0"}, "fake-vllm: -max-concurrent 0: must be > 0 (omit the flag for the default, 4)"},
		{[]string{"-time-scale", "0"}, "fake-vllm: -time-scale 0: must be a finite number > 0 (omit the flag for the default, 1)"},
		{[]string{"-prefill-per-token", "0s"}, "fake-vllm: -prefill-per-token 0s: must be > 0 (omit the flag for the default, 1ms)"},
		{[]string{"-cache-blocks", "0"}, "fake-vllm: -cache-blocks 0: must be > 0 (omit the flag for the default, 4096)"},
		// A negative value breaks the same rule as 0 and says so the same way.
		{[]string{"-max-concurrent", "-1"}, "fake-vllm: -max-concurrent -1: must be > 0 (omit the flag for the default, 4)"},
		{[]string{"-time-scale", "-1"}, "fake-vllm: -time-scale -1: must be a finite number > 0 (omit the flag for the default, 1)"},
		{[]string{"-time-scale", "NaN"}, "fake-vllm: -time-scale NaN: must be a finite number > 0 (omit the flag for the default, 1)"},
		{[]string{"-time-scale", "+Inf"}, "fake-vllm: -time-scale +Inf: must be a finite number > 0 (omit the flag for the default, 1)"},
		{[]string{"-decode-per-token", "-1ms"}, "fake-vllm: -decode-per-token -1ms: must be > 0 (omit the flag for the default, 20ms)"},
		{[]string{"-addr", "127.0.0.1:0", "-shutdown-timeout", "-1s"}, "fake-vllm: -shutdown-timeout -1s: must be >= 0 (0: in-flight requests are cut at once)"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a flag that is let through serves nothing and returns at once
			err := run(ctx, tt.args, io.Discard)
			require.Error(t, err)
			assert.Equal(t, tt.want, errorLine(err))
		})
	}

	var usage bytes.Buffer
	require.ErrorIs(t, run(context.Background(), []string{"-h"}, &usage), flag.ErrHelp)
	assert.True(t, strings.HasPrefix(usage.String(), "Usage of fake-vllm:\n"), "got %q", usage.String())
	assert.Contains(t, usage.String(), "running sequences (>= 1)")
}
