package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logLines returns the JSON log lines of logs whose msg starts with prefix.
func logLines(t *testing.T, logs *syncBuffer, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.Lines(logs.String()) {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &v), l)
		if msg, _ := v["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, v)
		}
	}
	return out
}

// A stale episode is logged at its end (Info) whichever way it ends, and the gauge
// follows: a backend that goes Down is not expected to report (tester38 finding 3: the
// gauge fell 642 -> 390 -> 0 as backends went Down, with no line saying so), one a reload
// removes is gone, and with load reports turned off no report is stale. The end by a
// successful scrape ("fresh again") is TestLoadScrapeStaleOnce's.
func TestLoadScrapeStaleEpisodeEnds(t *testing.T) {
	bs := map[string]*vllmMetrics{"d": newVLLMMetrics(t, "fail"), "r": newVLLMMetrics(t, "fail"), "k": newVLLMMetrics(t, "fail")}
	g, clk, ticks, logs, conf := loadGateway(t, bs, []string{"d", "r", "k"}, nil)
	stale := func() float64 { return staleGauge(t, g) }
	for i := range 5 { // 20 s: older than 3 intervals at the last pass
		ticks <- clk.Now()
		require.Eventually(t, func() bool {
			return strings.Count(logs.String(), "backend load report failed") == 3*(i+1)
		}, 5*time.Second, time.Millisecond)
		clk.Advance(5 * time.Second)
	}
	ticks <- clk.Now()
	ticks <- clk.Now() // the pass of the first tick has ended
	warn := logLines(t, logs, "backend load reports stale")
	require.Len(t, warn, 1, logs.String())
	assert.Equal(t, 3.0, warn[0]["count"])
	assert.Equal(t, 3.0, stale())

	ended := func(prefix string) map[string]any {
		t.Helper()
		var got []map[string]any
		require.Eventually(t, func() bool {
			got = logLines(t, logs, prefix)
			return len(got) > 0
		}, 5*time.Second, time.Millisecond, "no %q line in:\n%s", prefix, logs.String())
		require.Len(t, got, 1, logs.String())
		assert.Equal(t, "INFO", got[0]["level"])
		return got[0]
	}

	// Down: the next pass ends the episode.
	g.Scheduler().OnBackendDown("d")
	ticks <- clk.Now()
	ticks <- clk.Now()
	down := ended("backend load reports no longer stale: backends Down")
	assert.Equal(t, []any{"d"}, down["backends"])
	assert.Equal(t, 1.0, down["count"])
	assert.Equal(t, "down", down["why"])
	assert.Equal(t, 2.0, stale())

	// Removed by a reload (d, Down and not stale, is not listed).
	require.NoError(t, g.Reload(conf("k")))
	removed := ended("backend load reports no longer stale: backends removed")
	assert.Equal(t, []any{"r"}, removed["backends"])
	assert.Equal(t, 1.0, stale())

	// Load reports turned off.
	off := conf("k")
	off.LoadReportSeconds = 0
	require.NoError(t, g.Reload(off))
	gone := ended("backend load reports no longer stale: load reports turned off")
	assert.Equal(t, []any{"k"}, gone["backends"])
	assert.Zero(t, stale())
	assert.Empty(t, logLines(t, logs, "backend load reports fresh again"), "no episode ended by a scrape")
	assert.Len(t, logLines(t, logs, "backend load reports stale"), 1)
}
