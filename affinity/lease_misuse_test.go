package affinity_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// copyLease copies a filled Lease by reflection: the misuse go vet's copylocks check
// reports in plain code, which these tests need to reproduce.
func copyLease(l *affinity.Lease) *affinity.Lease {
	dup := new(affinity.Lease)
	reflect.ValueOf(dup).Elem().Set(reflect.ValueOf(l).Elem())
	return dup
}

// A copied Lease released twice (its copy's Done and its own) must not leave its backend
// with a negative or wrapped load (which looked full for good: no new session went
// there), and the backend must take new sessions again. The cases differ in what else is
// open on the backend when the extra release comes.
func TestCopiedLeaseDoneDoesNotWrapLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		others []int64 // costs of other leases open on the same backend meanwhile
	}{
		{"alone", nil},
		{"a cheaper lease open", []int64{10}},
		{"a dearer lease open", []int64{2000}},
		{"several open", []int64{1, 5000, 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSched(t, loadCfg(1.25, 1))
			bs := backendsN(3)
			l, err := acquire(s, "victim", "", bs, 1000)
			require.NoError(t, err)
			b := l.Backend.ID()
			var others []*affinity.Lease
			for i, c := range tc.others {
				o := new(affinity.Lease)
				require.NoError(t, s.LeaseBackend(l.Backend, c, o), "other %d", i)
				others = append(others, o)
			}
			copyLease(l).Done(affinity.DoneInfo{})
			l.Done(affinity.DoneInfo{})
			for _, o := range others {
				o.Done(affinity.DoneInfo{})
			}
			got := s.Load(b)
			require.GreaterOrEqual(t, got.Requests, int64(0))
			require.GreaterOrEqual(t, got.Cost, int64(0))
			require.LessOrEqual(t, got.Cost, int64(1000+6000), "cost wrapped: %+v", got)
			require.Less(t, s.LoadView(b), int64(10_000), "the backend looks busy for good")
			// New sessions still reach it.
			placed := map[string]int{}
			for i := range 300 {
				nl, err := acquire(s, fmt.Sprintf("new%d", i), "", bs, 100)
				require.NoError(t, err)
				placed[nl.Backend.ID()]++
				nl.Done(affinity.DoneInfo{})
			}
			require.Positive(t, placed[b], "no new session went to %s: %v", b, placed)
		})
	}
}

// A nil ClockFunc or *CoarseClock is the default clock, as a nil Clock is, not a panic.
func TestWithTypedNilClock(t *testing.T) {
	for _, c := range []affinity.Clock{affinity.ClockFunc(nil), (*affinity.CoarseClock)(nil)} {
		s, err := affinity.New(affinity.Config{}, affinity.WithClock(c))
		require.NoError(t, err)
		_, hit, err := s.SelectBackend("s", "", backendsN(2))
		require.NoError(t, err)
		require.False(t, hit)
		_, hit, err = s.SelectBackend("s", "", backendsN(2))
		require.NoError(t, err)
		require.True(t, hit)
	}
}
