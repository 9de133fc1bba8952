package metrics_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/metrics"
)

// series stands for an adapter's per-label payload; builds counts build calls per label.
type series struct{ label string }

type builder struct {
	mu     sync.Mutex
	builds map[string]int
}

func (b *builder) build(label string) *series {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.builds == nil {
		b.builds = map[string]int{}
	}
	b.builds[label]++
	return &series{label: label}
}

func newTierLabels(t *testing.T, cfg metrics.TierLabelsConfig) (*metrics.TierLabels[*series], *builder) {
	t.Helper()
	b := &builder{}
	l, err := metrics.NewTierLabels(cfg, b.build)
	require.NoError(t, err)
	return l, b
}

func TestTierLabelsResolve(t *testing.T) {
	long := strings.Repeat("x", metrics.MaxTierLabelBytes)
	tests := []struct {
		name   string
		cfg    metrics.TierLabelsConfig
		tiers  []string // resolved in order
		want   []string // label of each resolved payload
		builds map[string]int
	}{
		{"first N kept, rest other", metrics.TierLabelsConfig{MaxTiers: 2},
			[]string{"a", "b", "c", "a", "b", "c"}, []string{"a", "b", "other", "a", "b", "other"},
			map[string]int{"other": 1, "a": 1, "b": 1}},
		{"empty tier counts as one", metrics.TierLabelsConfig{MaxTiers: 2},
			[]string{"", "a", "b"}, []string{"default", "a", "other"},
			map[string]int{"other": 1, "default": 1, "a": 1}},
		{"empty tier kept after the limit", metrics.TierLabelsConfig{MaxTiers: 1},
			[]string{"a", "b", "", ""}, []string{"a", "other", "default", "default"},
			map[string]int{"other": 1, "a": 1, "default": 1}},
		{"invalid tiers fold and do not count", metrics.TierLabelsConfig{MaxTiers: 1},
			[]string{"\xff", long + "y", long, "b"}, []string{"other", "other", long, "other"},
			map[string]int{"other": 1, long: 1}},
		{"literal other shares the folded payload", metrics.TierLabelsConfig{MaxTiers: 4},
			[]string{"other"}, []string{"other"}, map[string]int{"other": 1}},
		{"literal default and empty share the label", metrics.TierLabelsConfig{MaxTiers: 4},
			[]string{"default", ""}, []string{"default", "default"}, map[string]int{"other": 1, "default": 2}},
		{"allow-list", metrics.TierLabelsConfig{HasAllow: true, Allow: []string{"gold", "", "gold"}},
			[]string{"gold", "silver", "", "other"}, []string{"gold", "other", "default", "other"},
			map[string]int{"other": 1, "gold": 1, "default": 1}},
		{"allow-list ignores MaxTiers", metrics.TierLabelsConfig{HasAllow: true, Allow: []string{"a", "b"}, MaxTiers: 1},
			[]string{"a", "b", "c"}, []string{"a", "b", "other"}, map[string]int{"other": 1, "a": 1, "b": 1}},
		{"empty allow-list keeps default and other", metrics.TierLabelsConfig{HasAllow: true},
			[]string{"x", "", ""}, []string{"other", "default", "default"}, map[string]int{"other": 1, "default": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, b := newTierLabels(t, tt.cfg)
			other := l.Resolve("\xff")
			got := make([]string, len(tt.tiers))
			for i, tier := range tt.tiers {
				p := l.Resolve(tier)
				got[i] = p.label
				assert.Equal(t, p.label, l.Label(tier), "Label(%q) agrees with Resolve", tier)
				if p.label == metrics.OtherTier {
					assert.Same(t, other, p, "every folded tier shares one payload")
				}
				assert.Same(t, p, l.Resolve(tier), "a resolved tier keeps its payload")
			}
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.builds, b.builds)
		})
	}
}

func TestTierLabelsLabelCreatesNothing(t *testing.T) {
	l, b := newTierLabels(t, metrics.TierLabelsConfig{MaxTiers: 1})
	assert.Equal(t, "a", l.Label("a"), "still keepable")
	assert.Equal(t, "b", l.Label("b"), "still keepable: Label took no slot")
	assert.Equal(t, "default", l.Label(""))
	assert.Equal(t, "other", l.Label("\xff"))
	assert.Equal(t, map[string]int{"other": 1}, b.builds)
	l.Resolve("b")
	assert.Equal(t, "other", l.Label("a"), "full")
	assert.Equal(t, "b", l.Label("b"))
	assert.Equal(t, "default", l.Label(""))
}

func TestTierLabelsKeyNotAliased(t *testing.T) {
	l, _ := newTierLabels(t, metrics.TierLabelsConfig{MaxTiers: 4})
	buf := []byte("gold")
	p := l.Resolve(unsafe.String(&buf[0], len(buf))) // a tier aliasing a caller's buffer
	copy(buf, "lead")                                // the caller reuses its buffer
	assert.Same(t, p, l.Resolve("gold"), "the kept key is a copy")
	assert.Equal(t, "gold", l.Label("gold"))
	assert.Equal(t, "lead", l.Resolve("lead").label, "a new tier, not gold's payload")
}

func TestNewTierLabelsErrors(t *testing.T) {
	build := func(label string) string { return label }
	tests := []struct {
		name  string
		cfg   metrics.TierLabelsConfig
		build func(string) string
	}{
		{"nil build", metrics.TierLabelsConfig{MaxTiers: 1}, nil},
		{"MaxTiers 0", metrics.TierLabelsConfig{}, build},
		{"MaxTiers negative", metrics.TierLabelsConfig{MaxTiers: -3}, build},
		{"allow-listed invalid UTF-8", metrics.TierLabelsConfig{HasAllow: true, Allow: []string{"ok", "\xff"}}, build},
		{"allow-listed too long", metrics.TierLabelsConfig{HasAllow: true,
			Allow: []string{strings.Repeat("x", metrics.MaxTierLabelBytes+1)}}, build},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := metrics.NewTierLabels(tt.cfg, tt.build)
			require.ErrorIs(t, err, metrics.ErrInvalidTierLabels)
			assert.Nil(t, l)
		})
	}
	// Without HasAllow an Allow list is ignored, invalid entries included.
	_, err := metrics.NewTierLabels(metrics.TierLabelsConfig{Allow: []string{"\xff"}, MaxTiers: 1}, build)
	require.NoError(t, err)
}

func TestValidTierLabel(t *testing.T) {
	tests := []struct {
		tier string
		want bool
	}{
		{"", true},
		{"gold", true},
		{"黄金", true},
		{strings.Repeat("x", metrics.MaxTierLabelBytes), true},
		{strings.Repeat("x", metrics.MaxTierLabelBytes+1), false},
		{"\xff", false},
		{"a\xc3", false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, metrics.ValidTierLabel(tt.tier), "%q", tt.tier)
	}
}

// Many goroutines racing on new tiers: exactly MaxTiers labels are kept, each built once.
func TestTierLabelsConcurrentFirstSightings(t *testing.T) {
	const maxTiers, tiers, workers = 8, 40, 8
	l, b := newTierLabels(t, metrics.TierLabelsConfig{MaxTiers: maxTiers})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tiers {
				p := l.Resolve(fmt.Sprintf("t%d", (i+w)%tiers))
				assert.Equal(t, p.label, l.Label(fmt.Sprintf("t%d", (i+w)%tiers)))
			}
		}()
	}
	wg.Wait()
	kept := 0
	for i := range tiers {
		if l.Label(fmt.Sprintf("t%d", i)) != metrics.OtherTier {
			kept++
		}
	}
	assert.Equal(t, maxTiers, kept)
	require.Len(t, b.builds, maxTiers+1)
	for label, n := range b.builds {
		assert.Equal(t, 1, n, "label %q built once", label)
	}
}

func TestTierLabelsConfigSetters(t *testing.T) {
	tests := []struct {
		name    string
		set     func(c *metrics.TierLabelsConfig) error
		wantErr string // "" = accepted
		want    metrics.TierLabelsConfig
	}{
		{"allow", func(c *metrics.TierLabelsConfig) error { return c.SetAllow([]string{"a", ""}) }, "",
			metrics.TierLabelsConfig{Allow: []string{"a", ""}, HasAllow: true, MaxTiers: 3}},
		{"empty allow-list", func(c *metrics.TierLabelsConfig) error { return c.SetAllow(nil) }, "",
			metrics.TierLabelsConfig{Allow: []string{}, HasAllow: true, MaxTiers: 3}},
		{"allow invalid UTF-8", func(c *metrics.TierLabelsConfig) error { return c.SetAllow([]string{"a", "\xff"}) }, `"\xff"`,
			metrics.TierLabelsConfig{MaxTiers: 3}},
		{"allow too long", func(c *metrics.TierLabelsConfig) error {
			return c.SetAllow([]string{strings.Repeat("t", metrics.MaxTierLabelBytes+1)})
		}, "longer than", metrics.TierLabelsConfig{MaxTiers: 3}},
		{"max tiers", func(c *metrics.TierLabelsConfig) error { return c.SetMaxTiers(7) }, "",
			metrics.TierLabelsConfig{MaxTiers: 7}},
		{"max tiers 0", func(c *metrics.TierLabelsConfig) error { return c.SetMaxTiers(0) }, "MaxTiers 0",
			metrics.TierLabelsConfig{MaxTiers: 3}},
		{"max tiers negative", func(c *metrics.TierLabelsConfig) error { return c.SetMaxTiers(-1) }, "MaxTiers -1",
			metrics.TierLabelsConfig{MaxTiers: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := metrics.TierLabelsConfig{MaxTiers: 3}
			err := tc.set(&c)
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, metrics.ErrInvalidTierLabels)
				assert.Contains(t, err.Error(), tc.wantErr)
			}
			if tc.want.Allow != nil && len(tc.want.Allow) == 0 {
				assert.Empty(t, c.Allow)
				assert.True(t, c.HasAllow)
				return
			}
			assert.Equal(t, tc.want, c, "an error leaves the config unchanged")
		})
	}
	allow := []string{"a"}
	var c metrics.TierLabelsConfig
	require.NoError(t, c.SetAllow(allow))
	allow[0] = "b"
	assert.Equal(t, []string{"a"}, c.Allow, "SetAllow keeps a copy")
}
