package health

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Target is one backend to probe.
type Target struct {
	// ID is the backend ID reported in Transitions; non-empty and unique per Prober.
	ID string `yaml:"id" json:"id"`
	// URL is the backend's base URL, e.g. "http://10.0.0.5:8000"; an http or https URL
	// with a host and no user info, query or fragment. The probe requests URL + Path
	// (one trailing "/" of URL is dropped first).
	URL string `yaml:"url" json:"url"`
}

// ProberOption configures [NewProber]; options are code seams, not configuration.
type ProberOption interface{ apply(*Prober) }

type proberOptionFunc func(*Prober)

func (f proberOptionFunc) apply(p *Prober) { f(p) }

// WithHTTPClient makes the Prober send probes with c (its Transport, redirect policy and
// Timeout apply, in addition to the per-probe timeout). nil means the default: a client
// on http.DefaultTransport that does not follow redirects (a 3xx is a failure).
func WithHTTPClient(c *http.Client) ProberOption {
	return proberOptionFunc(func(p *Prober) {
		if c != nil {
			p.client = c
		}
	})
}

// WithTicks makes [Prober.Run] start a full round (every target at once, as
// [Prober.ProbeOnce]) on every value received from ticks instead of following its own
// spread schedule (see [Prober.Run]): for tests and for callers that schedule rounds.
// nil means the default schedule.
func WithTicks(ticks <-chan time.Time) ProberOption {
	return proberOptionFunc(func(p *Prober) { p.ticks = ticks })
}

// WithObserver adds fn to the functions called with every transition of a target (only
// Healthy -> Down and Down -> Healthy). Observers are called one at a time, in the order
// the transitions happened, outside the Prober's locks, with the delivery rules of
// [Set.Subscribe]; with several WithObserver options each transition goes to all of them
// in option order. Typical use: WithObserver(scheduler.OnHealthChange). nil is ignored.
func WithObserver(fn func(Transition)) ProberOption {
	return proberOptionFunc(func(p *Prober) {
		if fn != nil {
			p.observers = append(p.observers, fn)
		}
	})
}

// WithReporter adds fn to the functions called with the Prober's verdict on a target —
// healthy true or false — the first time it has one and every time it changes: a target's
// first successful probe reports true at once; FailureThreshold consecutive failures
// report false; after that, each change (the thresholds of [Prober]) is reported. So a
// new Prober reports its full view instead of differences from an assumed "all healthy",
// and whatever held the old view converges to the new one: a backend an earlier prober
// marked Down is reported healthy after one successful probe. Until a target has a
// verdict nothing is reported for it and the receiver keeps what it knew.
//
// Typical use: WithReporter(scheduler.Observe), or a func calling [Set.Observe] — both
// record observations and never end an operator's drain. Reporters are called one at a
// time, in target order within a batch of results (a round, or a step of Run's schedule)
// and in the order the batches are applied, on the goroutine that applies the batch,
// after its results are applied and outside the locks that guard them; a
// reporter must not call [Prober.ProbeOnce] (it would wait for itself). With several
// WithReporter options each verdict goes to all of them in option order. nil is ignored.
func WithReporter(fn func(id string, healthy bool)) ProberOption {
	return proberOptionFunc(func(p *Prober) {
		if fn != nil {
			p.reporters = append(p.reporters, fn)
		}
	})
}

// WithStartDown makes the targets with these IDs start Down, with a verdict, as if they
// had failed FailureThreshold times: each becomes Healthy only after SuccessThreshold
// consecutive successful probes, and that transition goes to observers and reporters as
// any other. Nothing is reported for them at start (the receiver is expected to hold
// them Down already). IDs that are not targets are ignored; several WithStartDown
// options add up. For replacing a Prober without losing which targets it held Down: pass
// the old one's Down targets (Prober.State), so that a reload of the health settings
// does not declare a dead backend healthy; [WithStateFrom] does that and also keeps the
// counts and the schedule, and overrides WithStartDown for the targets it carries.
func WithStartDown(ids ...string) ProberOption {
	ids = slices.Clone(ids)
	return proberOptionFunc(func(p *Prober) { p.startDown = append(p.startDown, ids...) })
}

// Prober is an optional active health checker for users who have none: it sends an HTTP
// GET to every target's URL + Path each interval and tracks consecutive results. A target
// starts Healthy; FailureThreshold consecutive failures mark it Down, then
// SuccessThreshold consecutive successes mark it Healthy again. A 2xx response is a
// success; any other status, a transport error (e.g. connection refused) or a timeout is a
// failure. The Prober never reports Draining: drains are operator intent, kept by [Set].
//
// [Prober.Run] spreads the probes: each target is probed once per interval at its own
// offset within the interval (a stable hash of its ID), so that thousands of targets do
// not all open connections at the same instant.
//
// Replacing a Prober (configuration reload, restart of the checker): build the new one
// with [WithStateFrom] of the old one, which carries over, for the targets that stay
// (same ID and probe URL), their state, their consecutive counts and their schedule, and
// retires the old one; then stop the old one's Run and start the new one's. Without it,
// give the new one a [WithReporter] wired to the same receiver and call [Set.Retain] with
// its target IDs; the receiver then converges to the new Prober's view (see
// WithReporter); to keep the targets the old one held Down from being reported healthy
// after a single success, start the new one with [WithStartDown] of them: they rise
// after SuccessThreshold. But every target then starts its failure count again, so
// replacing the Prober faster than FailureThreshold intervals would never let a dead
// target go Down. [WithObserver] transitions start from "all Healthy" (or from the
// carried states) and are kept for compatibility.
//
// It starts no goroutine of its own outside [Prober.Run], [Prober.ProbeOnce] and
// [Prober.ProbeDue], and those join every goroutine they start before returning.
// Results are applied one batch at a time (a ProbeOnce round, or the targets one step of
// Run's schedule started), in target order within a batch; ProbeOnce rounds take turns.
// All methods are safe for concurrent use.
type Prober struct {
	cfg       resolved
	targets   []probeTarget
	client    *http.Client
	ticks     <-chan time.Time
	observers []func(Transition)
	reporters []func(id string, healthy bool)
	startDown []string // WithStartDown: applied by NewProber
	from      *Prober  // WithStateFrom: taken over by NewProber
	states    Set      // mirror of the targets' states; delivers observer calls

	onceMu   sync.Mutex // serializes ProbeOnce rounds
	roundMu  sync.Mutex // guards targets[i]'s mutable fields and retired
	reportMu sync.Mutex // serializes reporter calls, taken before roundMu is released
	retired  bool       // a newer Prober took over the state (WithStateFrom): apply nothing
}

type probeTarget struct {
	id, url      string
	phase        time.Duration // offset of its probes within the interval (schedule.go)
	fails, succs int
	state        State
	known        bool      // the target has a verdict (reported to reporters)
	next         time.Time // when Run probes it next; zero: never probed nor scheduled (spreadFirst)
	busy         bool      // a probe Run started is in flight
	launchedFor  time.Time // the due time of that probe: due again if it is not counted
}

// verdict is one report for the reporters.
type verdict struct {
	id      string
	healthy bool
}

// NewProber validates cfg and targets and returns a Prober with every target Healthy.
// Errors wrap [ErrInvalidProbeConfig], [ErrInvalidTarget] (empty ID, or a URL that is not
// an absolute http(s) URL with a host and without user info, query or fragment) or
// [ErrDuplicateTarget], naming the offending value. nil options are ignored.
//
// Decision: an empty targets list (nil or zero length) is valid, not an error: the
// Prober's rounds probe nothing and report nothing, and [Prober.Run] waits for ctx like
// any other. A Prober is replaced, not edited, when its targets change (see [Prober]),
// and a caller that builds it from a discovered list that is momentarily empty should
// not have to special-case that; a caller for which no targets is a mistake checks
// len(targets) itself. Cost: O(targets); nothing is sent until a round runs.
func NewProber(cfg ProbeConfig, targets []Target, opts ...ProberOption) (*Prober, error) {
	rc, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	p := &Prober{cfg: rc, targets: make([]probeTarget, 0, len(targets))}
	seen := make(map[string]int, len(targets))
	for i, t := range targets {
		if t.ID == "" {
			return nil, fmt.Errorf("%w: targets[%d] has an empty ID (url %q)", ErrInvalidTarget, i, RedactURL(t.URL))
		}
		if j, dup := seen[t.ID]; dup {
			return nil, fmt.Errorf("%w: %q at targets[%d] and targets[%d]", ErrDuplicateTarget, t.ID, j, i)
		}
		seen[t.ID] = i
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil {
			return nil, fmt.Errorf("%w: target %q url %q (want http(s)://host[:port][/prefix], no user:password@)",
				ErrInvalidTarget, t.ID, RedactURL(t.URL))
		}
		p.targets = append(p.targets, probeTarget{
			id:    t.ID,
			url:   strings.TrimSuffix(t.URL, "/") + rc.path,
			phase: phaseOf(t.ID, rc.interval),
		})
	}
	for _, o := range opts {
		if o != nil { // as affinity.New: a nil option is ignored, not a panic
			o.apply(p)
		}
	}
	if p.client == nil {
		p.client = &http.Client{
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	for _, id := range p.startDown {
		if i := slices.IndexFunc(p.targets, func(t probeTarget) bool { return t.id == id }); i >= 0 {
			t := &p.targets[i]
			t.known, t.state, t.fails = true, Down, rc.failureThreshold
			p.states.update(id, func(entry) entry { return makeEntry(true, false) }) // before any subscriber: not delivered
		}
	}
	p.startDown = nil
	if p.from != nil {
		p.takeOver(p.from)
		p.from = nil
	}
	for _, fn := range p.observers {
		p.states.Subscribe(fn)
	}
	return p, nil
}

// State returns the prober's current view of target id (Healthy for an unknown ID).
// Lock-free, 0 allocs.
func (p *Prober) State(id string) State { return p.states.State(id) }

// ProbeOnce runs one synchronous round: every target is probed in its own goroutine, all
// are joined, then results are applied in target order and the resulting transitions are
// delivered to observers (outside the Prober's locks) before ProbeOnce returns — unless
// another goroutine is delivering, which then delivers them in order. Probes that fail
// because ctx is done are not counted. A round takes at most about TimeoutSeconds (plus
// the wait for a ProbeOnce round already running: ProbeOnce rounds take turns). It is
// independent of Run's schedule: it does not move a target's next scheduled probe, and a
// probe Run started may complete during the round (each result is applied as it
// completes). A Prober another one took over ([WithStateFrom]) probes nothing. Cost: one
// goroutine and one HTTP request per target, joined before it returns; allocates.
func (p *Prober) ProbeOnce(ctx context.Context) {
	p.onceMu.Lock()
	defer p.onceMu.Unlock()
	p.roundMu.Lock()
	idx := make([]int, 0, len(p.targets))
	if !p.retired {
		for i := range p.targets {
			idx = append(idx, i)
		}
	}
	p.roundMu.Unlock()
	ok, counted := p.probeAll(ctx, idx)
	p.apply(idx, ok, counted, false)
}

// apply records the results of the targets idx (ok[k] and counted[k] for idx[k]) in
// that order, then calls the reporters and delivers the transitions outside roundMu.
// scheduled: the probes were started by Run's schedule (their busy flags are cleared,
// and an uncounted one is due again). A retired Prober applies nothing.
func (p *Prober) apply(idx []int, ok, counted []bool, scheduled bool) {
	p.roundMu.Lock()
	if p.retired {
		p.roundMu.Unlock()
		return
	}
	turn := false
	var verdicts []verdict
	for k, i := range idx {
		t := &p.targets[i]
		if scheduled {
			t.busy = false
			if !counted[k] {
				t.next = t.launchedFor
			}
		}
		if !counted[k] {
			continue
		}
		to, report := t.record(ok[k], p.cfg)
		if !report {
			continue
		}
		if len(p.reporters) > 0 {
			verdicts = append(verdicts, verdict{t.id, to == Healthy})
		}
		down := to == Down
		_, _, tr := p.states.update(t.id, func(entry) entry { return makeEntry(down, false) })
		turn = turn || tr
	}
	p.reportMu.Lock()
	p.roundMu.Unlock()
	for _, v := range verdicts {
		for _, fn := range p.reporters {
			fn(v.id, v.healthy)
		}
	}
	p.reportMu.Unlock()
	if turn {
		p.states.deliver()
	}
}

// probeAll probes the targets idx in parallel and joins them. ok[k] is the result of
// target idx[k]; counted[k] is false for a failure caused by ctx being done. The URLs
// are immutable: no lock is needed to read them.
func (p *Prober) probeAll(ctx context.Context, idx []int) (ok, counted []bool) {
	ok = make([]bool, len(idx))
	counted = make([]bool, len(idx))
	var wg sync.WaitGroup
	for k, i := range idx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok[k] = p.probe(ctx, p.targets[i].url)
			counted[k] = ok[k] || ctx.Err() == nil
		}()
	}
	wg.Wait()
	return ok, counted
}

// probe sends one GET and reports whether it returned 2xx within the timeout.
func (p *Prober) probe(ctx context.Context, target string) bool {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.timeout)
	defer cancel()
	return Check(ctx, p.client, target)
}

// Check sends one GET to url with client (nil: http.DefaultClient, which, unlike the
// Prober's default client, follows redirects) and reports whether
// the backend answered 2xx and its body (up to 4 KiB, read so that the connection can be
// reused) arrived before ctx ended. A transport error, a non-2xx status, or a body that
// stalls past ctx's deadline or breaks off is a failure. The [Prober] runs one Check per
// target and round under its timeout; call it directly for a one-off check, e.g. to see
// whether a backend marked Down by a failed request is back. Safe for concurrent use;
// cost: one HTTP request.
func Check(ctx context.Context, client *http.Client, url string) bool {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	return err == nil && resp.StatusCode >= 200 && resp.StatusCode <= 299
}

// record applies one probe result and returns the target's state and whether it is a
// verdict to report: the first one (the first success, or FailureThreshold consecutive
// failures of a target without a verdict) or a change.
func (t *probeTarget) record(ok bool, cfg resolved) (State, bool) {
	if ok {
		t.fails = 0
		if t.succs < cfg.successThreshold {
			t.succs++
		}
		if !t.known || (t.state == Down && t.succs >= cfg.successThreshold) {
			t.known, t.state = true, Healthy
			return Healthy, true
		}
		return t.state, false
	}
	t.succs = 0
	if t.fails < cfg.failureThreshold {
		t.fails++
	}
	if (!t.known || t.state == Healthy) && t.fails >= cfg.failureThreshold {
		t.known, t.state = true, Down
		return Down, true
	}
	return t.state, false
}

// RedactURL returns a target URL as errors and logs may show it: raw itself when it
// parses and has no user:password@, else with the password replaced by "xxxxx"
// (url.URL.Redacted); when raw does not parse, everything between "://" and the last '@'
// before the next '/' is replaced, so a password never shows. Safe for concurrent use;
// O(len(raw)).
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if u.User == nil {
			return raw
		}
		return u.Redacted()
	}
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	auth, _, _ := strings.Cut(rest, "/")
	at := strings.LastIndexByte(auth, '@')
	if at < 0 {
		return raw
	}
	start := len(raw) - len(rest)
	return raw[:start] + "xxxxx" + raw[start+at:]
}
