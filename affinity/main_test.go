package affinity_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type fixture struct {
	s   *affinity.Scheduler
	clk *affinitytest.Clock
	rec *metrics.Recording
}

func newFixture(t testing.TB, cfg affinity.Config, opts ...affinity.Option) *fixture {
	t.Helper()
	f := &fixture{clk: affinitytest.NewClock(t0), rec: &metrics.Recording{}}
	opts = append([]affinity.Option{affinity.WithClock(f.clk), affinity.WithRecorder(f.rec)}, opts...)
	s, err := affinity.New(cfg, opts...)
	require.NoError(t, err)
	f.s = s
	return f
}

// sel calls SelectBackend and requires no error; it returns the backend ID and the hit flag.
func (f *fixture) sel(t testing.TB, session, tier string, cands []affinity.Backend) (string, bool) {
	t.Helper()
	b, hit, err := f.s.SelectBackend(session, tier, cands)
	require.NoError(t, err)
	return b.ID(), hit
}

// backends returns n backends "b00".."b<n-1>" with weight 1.
func backends(t testing.TB, n int) []affinity.Backend {
	t.Helper()
	bs := make([]affinity.Backend, n)
	for i := range bs {
		b, err := affinity.NewBackend(fmt.Sprintf("b%02d", i), fmt.Sprintf("http://10.0.0.%d:8000", i), 0)
		require.NoError(t, err)
		bs[i] = b
	}
	return bs
}

// without returns cands minus the backends with the given IDs.
func without(cands []affinity.Backend, ids ...string) []affinity.Backend {
	return slices.DeleteFunc(slices.Clone(cands), func(b affinity.Backend) bool { return slices.Contains(ids, b.ID()) })
}

// hrwWinner is the reference placement: hrw.Pick over the candidates' nodes, keyed by the
// session ID.
func hrwWinner(session string, cands []affinity.Backend) string {
	nodes := make([]hrw.Node, len(cands))
	for i, b := range cands {
		nodes[i] = b.Node()
	}
	return cands[hrw.Pick(hrw.KeyHash(session), nodes)].ID()
}

// sessionOn finds a session ID (prefix + n) whose HRW winner over cands is id.
func sessionOn(t testing.TB, prefix, id string, cands []affinity.Backend) string {
	t.Helper()
	for n := range 10000 {
		s := fmt.Sprintf("%s%d", prefix, n)
		if hrwWinner(s, cands) == id {
			return s
		}
	}
	t.Fatalf("no session lands on %s", id)
	return ""
}
