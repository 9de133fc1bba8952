package health

import (
	"context"
	"hash/fnv"
	"sync"
	"time"
)

// phaseSlots is the number of offsets within the interval that Run spreads the targets
// over: at most this many wake-ups per interval, each starting the probes of the targets
// whose offset it is (about len(targets)/phaseSlots of them).
const phaseSlots = 128

// phaseOf returns the offset of id's probes within interval: a stable hash of the ID
// (FNV-1a, the same in every process) picks one of phaseSlots equal slots.
func phaseOf(id string, interval time.Duration) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return time.Duration(h.Sum64()%phaseSlots) * (interval / phaseSlots)
}

// firstProbesPerSlot is how many first probes (of targets never probed: a new Prober's,
// and those a reload adds) start together at most, in one slot of the interval
// (interval/phaseSlots) — unless a batch is too large to be spread over one interval at
// that rate: then ceil(batch/phaseSlots) per slot, so every target of a batch has its
// first probe within one interval of the step that finds the batch. A batch of up to
// this many (a lone new backend, a few) is probed at once, as before.
const firstProbesPerSlot = 16

// spreadFirst gives the targets never probed and not yet scheduled (next zero, not busy)
// their first probe time: the first firstProbesPerSlot (or the larger per-slot count a
// large batch needs) at now, the next as many one slot later, and so on, in target
// order. Under roundMu. O(targets).
func (p *Prober) spreadFirst(now time.Time) {
	n := 0
	for i := range p.targets {
		if t := &p.targets[i]; t.next.IsZero() && !t.busy {
			n++
		}
	}
	if n == 0 {
		return
	}
	per := max(firstProbesPerSlot, (n+phaseSlots-1)/phaseSlots)
	slot := p.cfg.interval / phaseSlots
	k := 0
	for i := range p.targets {
		if t := &p.targets[i]; t.next.IsZero() && !t.busy {
			t.next = now.Add(time.Duration(k/per) * slot)
			k++
		}
	}
}

// nextSlot returns when t is probed after a probe started at now: the first instant at
// least half an interval after now whose offset from the Unix epoch, modulo the
// interval, is t's phase. So a target is probed once per interval at a fixed offset, and
// the gap after its first probe (or after a missed one) is between half an interval and
// one and a half.
func (p *Prober) nextSlot(t *probeTarget, now time.Time) time.Time {
	iv := int64(p.cfg.interval)
	from := now.UnixNano() + iv/2 - int64(t.phase)
	k := from / iv
	if from%iv != 0 && from > 0 {
		k++
	}
	return time.Unix(0, k*iv+int64(t.phase))
}

// Run probes each target once per interval, at a stable offset within the interval
// derived from a hash of its ID, in the calling goroutine plus one goroutine per target
// probed, until ctx is done. So the probes of many targets are spread across the
// interval instead of all starting at once, and a slow target does not delay the others.
// A target that has not been probed yet (a new Prober's targets, and the targets that
// [WithStateFrom] did not carry over) is probed at once when there are at most 16 such
// targets; a larger batch is spread: at most 16 first probes per slot of the interval
// (interval/128), or ceil(batch/128) when more are needed to probe the whole batch within
// one interval, so a reload that adds hundreds of backends does not open hundreds of
// connections at one instant. A carried-over target keeps the schedule it had (including
// a first probe still to come). A target whose probe is still in flight when it is due again is not
// probed twice: that probe is dropped, never queued. With [WithTicks], Run instead starts
// a full round ([Prober.ProbeOnce]) at once and then on every tick, as before the
// schedule existed. [Prober.ProbeDue] is the schedule's step, exported for tests and for
// callers that keep their own clock.
//
// It returns nil when ctx is done (cancellation is the normal way to stop) or when the
// WithTicks channel is closed; it never returns another error. Probes in flight when ctx
// is done are cancelled and not counted (a carried-over target whose probe was cut short
// is due at once for the Prober that takes over), and joined before Run returns: no
// goroutine outlives Run. A Prober another one took over waits for ctx, probing nothing.
// Cost per interval: about phaseSlots (128) wake-ups, each O(targets).
func (p *Prober) Run(ctx context.Context) error {
	if p.ticks != nil {
		return p.runTicks(ctx)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		idx, wake := p.due(time.Now())
		if len(idx) > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.probeScheduled(ctx, idx)
			}()
		}
		if wake.IsZero() { // no targets, or retired
			<-ctx.Done()
			return nil
		}
		timer.Reset(time.Until(wake))
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
	}
}

// runTicks is Run with [WithTicks]: a full round at once and on every tick.
func (p *Prober) runTicks(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			return nil
		}
		p.ProbeOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-p.ticks:
			if !ok {
				return nil
			}
		}
	}
}

// ProbeDue runs one step of [Prober.Run]'s schedule at the time now, synchronously: it
// probes the targets due at or before now (each in its own goroutine, as Run), schedules
// their next probe, joins them and applies their results, as [Prober.ProbeOnce] applies
// a round's, before it returns. Tests drive the schedule with it and a fake clock; Run
// calls the same step with the system clock (without waiting for the probes). Probes
// that fail because ctx is done are not counted and their targets stay due. Cost:
// O(targets) plus one goroutine and one HTTP request per due target.
func (p *Prober) ProbeDue(ctx context.Context, now time.Time) {
	idx, _ := p.due(now)
	if len(idx) > 0 {
		p.probeScheduled(ctx, idx)
	}
}

// probeScheduled probes the targets idx that due started and applies the results.
func (p *Prober) probeScheduled(ctx context.Context, idx []int) {
	ok, counted := p.probeAll(ctx, idx)
	p.apply(idx, ok, counted, true)
}

// due marks the targets due at now busy, moves their next probe to their next slot, and
// returns their indices and the earliest next probe of any target (zero when there are
// no targets or p is retired).
func (p *Prober) due(now time.Time) (idx []int, wake time.Time) {
	p.roundMu.Lock()
	defer p.roundMu.Unlock()
	if p.retired {
		return nil, time.Time{}
	}
	p.spreadFirst(now)
	for i := range p.targets {
		t := &p.targets[i]
		if !t.next.After(now) {
			if !t.busy {
				t.busy, t.launchedFor = true, t.next
				idx = append(idx, i)
			}
			t.next = p.nextSlot(t, now)
		}
		if wake.IsZero() || t.next.Before(wake) {
			wake = t.next
		}
	}
	return idx, wake
}
