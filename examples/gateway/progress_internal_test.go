package gateway

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// progress records at most once per progressGranularity, and since is strict. Times are
// offsets from the record's epoch.
func TestProgressMark(t *testing.T) {
	g := progressGranularity
	tests := []struct {
		name   string
		marks  []time.Duration
		since  time.Duration
		want   bool
		stored time.Duration
	}{
		{"none yet", nil, 0, false, 0},
		{"after the wait began", []time.Duration{5 * g}, 4 * g, true, 5 * g},
		{"before the wait began", []time.Duration{5 * g}, 5 * g, false, 5 * g},
		{"within the granularity: not recorded", []time.Duration{5 * g, 5*g + g/2}, 5*g + 1, false, 5 * g},
		{"a granularity later: recorded", []time.Duration{5 * g, 6 * g}, 5*g + 1, true, 6 * g},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProgress()
			for _, m := range tt.marks {
				p.mark(p.epoch.Add(m))
			}
			assert.Equal(t, tt.want, p.since(p.epoch.Add(tt.since)))
			assert.Equal(t, int64(tt.stored), p.last.Load())
		})
	}
	p := newProgress()
	p.mark(time.Now())
	assert.True(t, p.since(p.epoch), "the first progress is recorded")
}

// A reload keeps a backend's progress record when its URL is unchanged.
func TestKeepProgress(t *testing.T) {
	cfg := func(urlB string) Config {
		c := Config{Backends: []BackendConfig{{ID: "a", URL: "http://a.test"}, {ID: "b", URL: urlB}}}.WithDefaults()
		require.NoError(t, c.Validate())
		return c
	}
	old, err := newRouting(cfg("http://b.test"))
	require.NoError(t, err)
	rt, err := newRouting(cfg("http://b2.test"))
	require.NoError(t, err)
	rt.keepProgress(old)
	assert.Same(t, old.byID["a"].prog, rt.byID["a"].prog)
	assert.NotSame(t, old.byID["b"].prog, rt.byID["b"].prog, "another server: its own record")
}
