package affinity

import (
	"context"
	"log/slog"

	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/metrics"
)

// OnBackendDown records id as observed down in the health set (health.Set.Observe(id,
// false); its drain, if any, is kept for when it comes back), so it is Down, then deletes every binding to id and
// counts each one that was still valid as broken{down} (expired ones as expired), and
// returns that count. Idempotent: a repeated call finds nothing and returns 0. An unknown
// id is still marked Down, so new sessions avoid it. Concurrent SelectBackend calls that
// race with it never leave a binding to id behind.
//
// Cost: O(bindings to id + shards); each shard is locked only while its own bindings to
// id are removed, so calls on other backends keep progressing. Recorder.Broken is called
// once per still-valid removed binding, after the locks are released, on the calling
// goroutine. Marking Down notifies the health set's subscribers with the rules of
// health.Set.Set (usually on this goroutine, before the bindings are removed).
func (s *Scheduler) OnBackendDown(id string) int {
	s.health.MarkDown(id)
	n, tally := s.t.deleteBackend(id, metrics.ReasonDown)
	for _, tc := range tally.list {
		for range tc.n {
			s.rec.Broken(tc.tier, metrics.ReasonDown)
		}
	}
	if n > 0 && s.log != nil {
		s.log.LogAttrs(context.Background(), slog.LevelInfo, "affinity: backend down, bindings dropped",
			slog.String("backend", id), slog.Int("bindings", n))
	}
	return n
}

// OnBackendUp records id as observed healthy (health.Set.Observe(id, true)): the backend
// is Healthy again, or Draining if an operator drained it — a health check never ends a
// drain, only [Scheduler.Undrain] does. No failback: existing bindings stay where they
// are; new sessions may land on id by HRW. Cost: one health set write ([health.Set.Set]:
// O(number of stored IDs) when something changes, which also notifies the set's
// subscribers of an effective change). Idempotent.
func (s *Scheduler) OnBackendUp(id string) { s.health.Observe(id, true) }

// Observe records a health check's verdict on id: healthy false is [Scheduler.OnBackendDown]
// (its bindings are dropped), true is [Scheduler.OnBackendUp]. Neither touches a drain.
// Its signature fits health.WithReporter, so a replacing health.Prober brings the
// Scheduler to its own view (see the health package). Cost of the method it calls.
func (s *Scheduler) Observe(id string, healthy bool) {
	if healthy {
		s.OnBackendUp(id)
		return
	}
	s.OnBackendDown(id)
}

// OnBackendDraining drains id (health.Set.Drain, operator intent): its valid bindings
// keep being honoured, new sessions go elsewhere unless no candidate is Healthy. The drain
// outlasts health observations — a drained backend that goes Down and comes back is
// Draining again — and ends only with [Scheduler.Undrain]. Cost as
// [Scheduler.OnBackendUp]. Idempotent.
func (s *Scheduler) OnBackendDraining(id string) { s.health.Drain(id) }

// Undrain ends an operator's drain of id (health.Set.Undrain): it becomes Healthy, or
// stays Down while observed down. Existing bindings are untouched. Cost as
// [Scheduler.OnBackendUp]. Idempotent.
func (s *Scheduler) Undrain(id string) { s.health.Undrain(id) }

// OnHealthChange applies a health transition (from a health.Prober observer or a
// subscription to another health.Set) as the observation or operator action behind it:
// To Down calls OnBackendDown; To Draining records id as observed up and drains it; To
// Healthy records id as observed up and, only when From is Draining (an explicit undrain
// in the source: a health.Set never goes Draining -> Healthy otherwise), undrains it. So a
// prober's Down -> Healthy never ends a drain made on this Scheduler. An invalid To is
// ignored. Its signature fits health.WithObserver and health.Set.Subscribe. Cost of the
// methods it calls.
func (s *Scheduler) OnHealthChange(tr health.Transition) {
	switch tr.To {
	case health.Down:
		s.OnBackendDown(tr.ID)
	case health.Draining:
		s.OnBackendUp(tr.ID)
		s.OnBackendDraining(tr.ID)
	case health.Healthy:
		s.OnBackendUp(tr.ID)
		if tr.From == health.Draining {
			s.Undrain(tr.ID)
		}
	}
}
