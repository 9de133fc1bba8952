package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A reload that lowers affinity.max_bindings copies each binding once: the new table
// keeps the newest max_bindings, the rest are counted as evictions once, and the log's
// bindings_copied is what the new table holds.
func TestReloadShrinkingMaxBindingsCountsEachBindingOnce(t *testing.T) {
	urls := jsonBackends(t, 3)
	ids := []string{"b0", "b1", "b2"}
	clk := affinitytest.NewClock(time.Unix(1_700_000_000, 0))
	tests := []struct {
		name      string
		maxB      int
		wantKept  int
		wantEvict uint64
	}{
		{"shrink", 2, 2, 8},
		{"same size", 10, 10, 0},
		{"grow", 100, 10, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, buf := captureLogs()
			g, err := gateway.New(yamlConfig(t, urls, ids, []float64{1, 1, 1}, "affinity: {sticky_ttl_seconds: 600}\n"),
				gateway.WithSchedulerOptions(affinity.WithClock(clk)), gateway.WithLogger(log))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			for i := range 10 {
				send(t, g, fmt.Sprintf("s%d", i))
				clk.Advance(time.Second)
			}
			require.NoError(t, g.Reload(yamlConfig(t, urls, ids, []float64{1, 1, 1},
				fmt.Sprintf("affinity: {sticky_ttl_seconds: 600, max_bindings: %d}\n", tt.maxB))))
			require.Equal(t, tt.wantKept, g.Scheduler().Len())
			require.Equal(t, tt.wantEvict, g.Scheduler().Stats().Evictions, "evictions by the copy")
			require.Contains(t, buf.String(), fmt.Sprintf(`"bindings_copied":%d`, tt.wantKept))
			for i := 10 - tt.wantKept; i < 10; i++ { // the newest are kept
				_, ok := g.Scheduler().Lookup(fmt.Sprintf("s%d", i), "")
				require.True(t, ok, "s%d", i)
			}
		})
	}
}
