package health_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/health"
)

func TestSubscribeOnlySeesLaterTransitions(t *testing.T) {
	var s health.Set
	s.MarkDown("before")
	var got []health.Transition
	unsub := s.Subscribe(func(tr health.Transition) { got = append(got, tr) })
	s.MarkDown("after")
	s.MarkUp("before")
	unsub()
	s.MarkUp("after")
	unsub() // idempotent
	assert.Equal(t, []health.Transition{
		{ID: "after", From: health.Healthy, To: health.Down},
		{ID: "before", From: health.Down, To: health.Healthy},
	}, got)
}

func TestSubscribeNil(t *testing.T) {
	var s health.Set
	unsub := s.Subscribe(nil)
	assert.True(t, s.MarkDown("a"))
	unsub()
}

func TestSubscribersInOrderOfSubscription(t *testing.T) {
	var s health.Set
	var got []string
	for _, name := range []string{"first", "second", "third"} {
		s.Subscribe(func(tr health.Transition) { got = append(got, name+" "+tr.String()) })
	}
	s.MarkDown("a")
	s.MarkDraining("b")
	assert.Equal(t, []string{
		"first a: healthy -> down", "second a: healthy -> down", "third a: healthy -> down",
		"first b: healthy -> draining", "second b: healthy -> draining", "third b: healthy -> draining",
	}, got)
}

func TestReentrantSubscriber(t *testing.T) {
	var s health.Set
	var log []string
	var unsubLate func()
	s.Subscribe(func(tr health.Transition) {
		log = append(log, "enter "+tr.String())
		switch tr.ID {
		case "a":
			if tr.To == health.Down {
				// Calls back into the Set from inside delivery: queued, no deadlock.
				assert.Equal(t, health.Down, s.State("a"))
				unsubLate = s.Subscribe(func(tr health.Transition) { log = append(log, "late "+tr.String()) })
				assert.True(t, s.MarkDraining("b"))
				assert.Equal(t, health.Draining, s.State("b"), "the state changes at once")
			}
		case "b":
			switch tr.To {
			case health.Draining:
				assert.True(t, s.MarkDown("b"))
			case health.Down:
				// Unsubscribing from inside delivery: late does not get this transition
				// although it was subscribed when the change happened.
				unsubLate()
			}
		}
		log = append(log, "exit "+tr.ID)
	})
	assert.True(t, s.MarkDown("a"))
	assert.Equal(t, []string{
		"enter a: healthy -> down", "exit a",
		"enter b: healthy -> draining", "exit b",
		"late b: healthy -> draining",
		"enter b: draining -> down", "exit b",
	}, log)
}

func TestPanickingSubscriberDoesNotStallDelivery(t *testing.T) {
	var s health.Set
	var got []health.Transition
	s.Subscribe(func(tr health.Transition) {
		if tr.ID == "boom" {
			panic("subscriber bug")
		}
		got = append(got, tr)
	})
	assert.PanicsWithValue(t, "subscriber bug", func() { s.MarkDown("boom") })
	assert.Equal(t, health.Down, s.State("boom"), "the change itself took effect")
	assert.True(t, s.MarkDown("ok"))
	assert.Equal(t, []health.Transition{{ID: "ok", From: health.Healthy, To: health.Down}}, got)
}

// TestSubscriberOrderingUnderConcurrency flips IDs from many goroutines. The subscriber
// keeps no lock of its own: the race detector proves calls never overlap and are ordered
// by happens-before, and the per-ID chains prove delivery follows the order of changes.
func TestSubscriberOrderingUnderConcurrency(t *testing.T) {
	tests := []struct {
		name       string
		goroutines int
		ids        func(g int) string
	}{
		{"distinct ids", 8, func(g int) string { return fmt.Sprintf("b%d", g) }},
		{"one shared id", 8, func(int) string { return "shared" }},
		{"pairs share ids", 8, func(g int) string { return fmt.Sprintf("p%d", g/2) }},
	}
	const flips = 300
	cycle := []health.State{health.Down, health.Draining, health.Healthy, health.Down, health.Healthy}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s health.Set
			var (
				got      []health.Transition // no lock: calls are serialized by the Set
				inFlight atomic.Int32
				overlap  atomic.Bool
			)
			s.Subscribe(func(tr health.Transition) {
				if inFlight.Add(1) != 1 {
					overlap.Store(true)
				}
				got = append(got, tr)
				inFlight.Add(-1)
			})
			var changes atomic.Int64
			var wg sync.WaitGroup
			for g := range tt.goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := tt.ids(g)
					for i := range flips {
						if _, changed := s.Set(id, cycle[(i+g)%len(cycle)]); changed {
							changes.Add(1)
						}
					}
				}()
			}
			wg.Wait()

			require.False(t, overlap.Load(), "subscriber calls overlapped")
			require.Len(t, got, int(changes.Load()), "every change delivered exactly once")
			last := map[string]health.State{}
			for i, tr := range got {
				require.NotEqual(t, tr.From, tr.To, "transition %d is a no-op", i)
				require.Equal(t, last[tr.ID], tr.From, "transition %d (%v) does not follow the previous one of its ID", i, tr)
				last[tr.ID] = tr.To
			}
			for g := range tt.goroutines {
				id := tt.ids(g)
				assert.Equal(t, s.State(id), last[id], "final delivered state of %s matches the Set", id)
			}
		})
	}
}

func TestUnsubscribeConcurrentWithWriters(t *testing.T) {
	var s health.Set
	var calls atomic.Int64
	unsub := s.Subscribe(func(health.Transition) { calls.Add(1) })
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("b%d", g)
			for range 200 {
				s.MarkDown(id)
				s.MarkUp(id)
			}
		}()
	}
	unsub()
	after := calls.Load()
	wg.Wait()
	// Once unsub has returned, at most one call that was already in progress can finish.
	assert.LessOrEqual(t, calls.Load(), after+1)
}
