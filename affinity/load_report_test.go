package affinity_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

func TestReportLoad(t *testing.T) {
	s, _ := newSched(t, loadCfg(1.25, 1))
	require.ErrorIs(t, s.ReportLoad("", affinity.BackendLoad{}), affinity.ErrInvalidLoad)
	require.ErrorIs(t, s.ReportLoad("b00", affinity.BackendLoad{Waiting: -1}), affinity.ErrInvalidLoad)
	require.ErrorIs(t, s.ReportLoad("b00", affinity.BackendLoad{KVCache: 1.5}), affinity.ErrInvalidLoad)
	bs := backendsN(2)
	// Find a session whose HRW winner is b00, then report b00 busy: placement avoids it.
	ref, _ := newSched(t, affinity.Config{})
	var sid string
	for i := 0; ; i++ {
		sid = fmt.Sprintf("s%d", i)
		if b, _, _ := ref.SelectBackend(sid, "", bs); b.ID() == "b00" {
			break
		}
	}
	require.NoError(t, s.ReportLoad("b00", affinity.BackendLoad{Waiting: 30, Running: 8, KVCache: 0.9}))
	assert.Equal(t, affinity.LoadSnapshot{Reported: 38, KVCache: 0.9}, s.Load("b00"))
	require.NoError(t, s.ReportLoad("b01", affinity.BackendLoad{Running: 1}))
	l, err := acquire(s, sid, "", bs, 500)
	require.NoError(t, err)
	assert.Equal(t, "b01", l.Backend.ID(), "38 reported requests x 1024 tokens outweigh b01's one")
	l.Done(affinity.DoneInfo{})
}

// A report counts the requests beyond the leases open when it arrives: the backend's own
// leased request seen running by a scrape does not linger as a phantom queued request
// once its lease ends, and leases opened after the report do not hide the requests of
// others (queued_request_cost 1024 each).
func TestReportLoadCountsLeasesAtReport(t *testing.T) {
	s, _ := newSched(t, loadCfg(1.25, 1))
	a := []affinity.Backend{affinity.MustBackend("a", "", 1)}
	l1, err := acquire(s, "s1", "", a, 100)
	require.NoError(t, err)
	require.NoError(t, s.ReportLoad("a", affinity.BackendLoad{Running: 1})) // the scrape sees l1
	assert.Equal(t, int64(100), s.LoadView("a"), "the reported request is the lease itself")
	l1.Done(affinity.DoneInfo{})
	assert.Zero(t, s.LoadView("a"), "no phantom once it has ended")

	l1, err = acquire(s, "s2", "", a, 100) // a new session: charged its whole cost
	require.NoError(t, err)
	require.NoError(t, s.ReportLoad("a", affinity.BackendLoad{Waiting: 2, Running: 1})) // l1 and two others
	assert.Equal(t, int64(100+2*1024), s.LoadView("a"))
	var more [3]affinity.Lease
	for i := range more {
		require.NoError(t, s.Acquire(fmt.Sprint("t", i), "", a, 100, &more[i]))
	}
	assert.Equal(t, int64(4*100+2*1024), s.LoadView("a"), "leases opened since the report do not hide the two others")
	l1.Done(affinity.DoneInfo{})
	for i := range more {
		more[i].Done(affinity.DoneInfo{})
	}
	assert.Equal(t, int64(2*1024), s.LoadView("a"), "the two others until the next report")
	assert.Equal(t, int64(3), s.Load("a").Reported, "Reported is the report as given")
	require.NoError(t, s.ReportLoad("a", affinity.BackendLoad{}))
	assert.Zero(t, s.LoadView("a"))
}
