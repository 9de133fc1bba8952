package affinity_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentserve/sessionaffinity/affinity"
)

// TestLeaseRace: many goroutines acquire (some through LeaseBackend) and release leases (Done from other goroutines,
// twice, some by two goroutines at once; a Lease filled again after its Done; all
// concurrently with OnBackendDown/Up and load reports); afterwards every backend's
// outstanding load is 0. Run with -race.
func TestLeaseRace(t *testing.T) {
	s, _ := newSched(t, loadCfg(1.25, 1))
	bs := backendsN(8)
	leases := make(chan *affinity.Lease, 64)
	var ok atomic.Uint64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			var own affinity.Lease // filled again after each of its Done calls
			for i := range 2000 {
				l := &own
				if i%2 == 0 { // handed to the releasers
					l = new(affinity.Lease)
				}
				var err error
				if i%8 == 3 { // a request routed by the caller (a retry)
					err = s.LeaseBackend(bs[rng.IntN(len(bs))], int64(rng.IntN(3000)), l)
				} else {
					err = s.Acquire(fmt.Sprintf("s%d", rng.IntN(500)), "", bs, int64(rng.IntN(3000)), l)
				}
				if errors.Is(err, affinity.ErrNoEligibleBackend) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				if i%8 != 3 {
					ok.Add(1) // LeaseBackend counts nothing
				}
				if i%2 == 0 {
					leases <- l
					if i%4 == 0 { // both releasers may end it at once
						leases <- l
					}
				} else {
					l.Done(affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: int64(rng.IntN(1000)), CacheReported: true})
				}
			}
		}()
	}
	var rel sync.WaitGroup
	for range 2 {
		rel.Add(1)
		go func() {
			defer rel.Done()
			for l := range leases {
				l.Done(affinity.DoneInfo{})
				l.Done(affinity.DoneInfo{}) // twice
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 200 {
			id := bs[i%len(bs)].ID()
			s.OnBackendDown(id)
			_ = s.ReportLoad(id, affinity.BackendLoad{Waiting: int64(i % 7)})
			s.OnBackendUp(id)
		}
	}()
	wg.Wait()
	close(leases)
	rel.Wait()
	for _, b := range bs {
		assert.Equal(t, int64(0), s.Load(b.ID()).Requests, b.ID())
		assert.Equal(t, int64(0), s.Load(b.ID()).Cost, b.ID())
	}
	st := s.Stats()
	assert.Equal(t, ok.Load(), st.Hits+st.Misses, "every successful Acquire counted once")
}
