package health

// WithStateFrom makes [NewProber] take over old's view of the targets that stay: for each
// target of the new Prober with the same ID and the same probe URL (Target.URL without
// its trailing "/", plus ProbeConfig.Path: the request that is sent) as one of old's, it
// carries over the state (Healthy or Down), whether it has a verdict, the consecutive
// failure and success counts (cut to the new thresholds) and the time of its next
// scheduled probe. So replacing a Prober on every configuration change no longer restarts
// the count: a dead backend still goes Down after FailureThreshold failures, and a
// recovering one held Down comes back after SuccessThreshold successes, however often
// the Prober is replaced; and [Prober.Run] does not probe the carried targets at once
// (only new ones, a large batch of them spread over up to one interval, and one whose
// probe old had in flight). A carried target is not
// reported again to reporters, and a carried Down is not a transition for observers:
// the receivers are expected to be old's. It overrides [WithStartDown] for the targets it
// carries. A target whose URL or path changed is another server: it starts afresh.
//
// Taking over retires old, atomically with the copy: from then on old applies no probe
// result (its probes in flight are dropped), its rounds and its Run probe nothing (Run
// waits for its context), and its State answers stay as they were. So build the new
// Prober only when you are about to switch to it, and stop old's Run after. nil, or a
// Prober that is itself, is ignored; when several WithStateFrom options are given, the
// last one wins. Cost: O(targets of both) and one map of old's target IDs.
func WithStateFrom(old *Prober) ProberOption {
	return proberOptionFunc(func(p *Prober) {
		if old != nil && old != p {
			p.from = old
		}
	})
}

// takeOver copies old's state of the targets p shares with it and retires old. p is not
// shared yet (NewProber), and its observers are not subscribed: the mirror's updates are
// not delivered.
func (p *Prober) takeOver(old *Prober) {
	old.roundMu.Lock()
	defer old.roundMu.Unlock()
	old.retired = true
	byID := make(map[string]int, len(old.targets))
	for i, t := range old.targets {
		byID[t.id] = i
	}
	for i := range p.targets {
		t := &p.targets[i]
		j, ok := byID[t.id]
		if !ok || old.targets[j].url != t.url {
			continue
		}
		o := &old.targets[j]
		t.state, t.known = o.state, o.known
		t.fails = min(o.fails, p.cfg.failureThreshold)
		t.succs = min(o.succs, p.cfg.successThreshold)
		t.next = o.next
		if o.busy { // its result is dropped: probe it again at once
			t.next = o.launchedFor
		}
		down := t.state == Down
		p.states.update(t.id, func(entry) entry { return makeEntry(down, false) })
	}
}
