package prometheus_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	promaffinity "github.com/agentserve/sessionaffinity/metrics/prometheus"
)

// The dashboard parses, and every panel queries only series this package exports.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana/sessionaffinity.json")
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Title)
	require.NotEmpty(t, dash.UID)
	require.NotEmpty(t, dash.Panels)

	known := []string{promaffinity.MetricHits, promaffinity.MetricMisses, promaffinity.MetricBroken,
		promaffinity.MetricEvictions, promaffinity.MetricBindings, promaffinity.MetricStoreErrors}
	metricRE := regexp.MustCompile(`agentserve_[a-z_]+`)
	used := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		t.Run(p.Title, func(t *testing.T) {
			assert.False(t, ids[p.ID], "duplicate panel id %d", p.ID)
			ids[p.ID] = true
			require.NotEmpty(t, p.Targets)
			for _, tg := range p.Targets {
				names := metricRE.FindAllString(tg.Expr, -1)
				require.NotEmpty(t, names, "expr %q mentions no metric", tg.Expr)
				for _, n := range names {
					assert.True(t, slices.Contains(known, n), "expr %q: unknown metric %q", tg.Expr, n)
					used[n] = true
				}
				assert.Equal(t, strings.Count(tg.Expr, "("), strings.Count(tg.Expr, ")"), "unbalanced parentheses in %q", tg.Expr)
				// A ratio over an idle tier (no hits, no misses: e.g. an empty "other")
				// would be 0/0 = NaN; the denominator must drop zero series.
				if _, den, ok := strings.Cut(tg.Expr, " / "); ok {
					assert.True(t, strings.HasSuffix(strings.TrimSpace(den), "> 0)") || strings.Contains(den, "clamp_min("),
						"expr %q divides by a denominator that can be 0 (NaN series): guard it with \"> 0\"", tg.Expr)
				}
				assert.NotEmpty(t, tg.RefID)
			}
		})
	}
	for _, n := range known {
		assert.True(t, used[n], "no panel shows %s", n)
	}
	var titles []string
	for _, p := range dash.Panels {
		titles = append(titles, strings.ToLower(p.Title))
	}
	all := strings.Join(titles, "|")
	for _, want := range []string{"hit rate by tier", "misses", "broken", "by reason", "evictions", "bindings"} {
		assert.Contains(t, all, want)
	}
}
