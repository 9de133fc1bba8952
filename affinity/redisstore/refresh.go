package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/metrics"
)

// refreshQueue is the capacity of the queue of pending refreshes; a refresh that finds
// it full is dropped and counted as an error (the binding is refreshed by a later hit
// or re-created by the next miss).
const refreshQueue = 8192

// refreshBatch is the most refreshes sent in one pipeline.
const refreshBatch = 256

type refreshReq struct {
	key     affinity.StoreKey
	backend string
	ttl     time.Duration
	flushed chan struct{} // non-nil: a Flush marker, closed once the refreshes before it are sent
}

// Refresh implements [affinity.Store.Refresh]: it queues the refresh for the background
// worker, which sends up to 256 of them per pipeline. Never blocks: a full queue drops
// the refresh (counted as an error).
func (s *Store) Refresh(key affinity.StoreKey, backendID string, ttl time.Duration) {
	if s.closed.Load() {
		return
	}
	select {
	case s.refreshes <- refreshReq{key: key, backend: backendID, ttl: ttl}:
	default:
		s.dropped.Add(1)
		s.fail(metrics.StoreOpRefresh)
	}
}

// refreshLoop sends queued refreshes in pipelines until ctx ends.
func (s *Store) refreshLoop(ctx context.Context) {
	defer s.done.Done()
	batch := make([]refreshReq, 0, refreshBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.refreshes:
			batch = append(batch[:0], r)
		}
		var flushed chan struct{}
	fill:
		for {
			// Checked before the size: a marker may be the batch's last place.
			if last := batch[len(batch)-1]; last.flushed != nil {
				flushed = last.flushed
				batch = batch[:len(batch)-1]
				break
			}
			if len(batch) == refreshBatch {
				break
			}
			select {
			case r := <-s.refreshes:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		if len(batch) > 0 {
			s.sendRefreshes(ctx, batch)
		}
		if flushed != nil {
			close(flushed)
		}
	}
}

// Flush returns once every refresh queued before the call has been sent and its reply
// handled (for tests and orderly shutdown).
func (s *Store) Flush(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	ch := make(chan struct{})
	select {
	case s.refreshes <- refreshReq{flushed: ch}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendRefreshes sends one batch within the dial timeout. A failure is counted (op
// "refresh") unless parent has ended (Close): a batch that runs out of its own time
// against a hung or unreachable Redis is a failure like any other.
func (s *Store) sendRefreshes(parent context.Context, batch []refreshReq) {
	ctx, cancel := context.WithTimeout(parent, s.cfg.dial)
	defer cancel()
	since := s.begin()
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, r := range batch {
		cmds[i] = refreshScript.EvalSha(ctx, pipe, []string{s.Key(r.key)}, r.backend, px(r.ttl))
	}
	_, err := pipe.Exec(ctx)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The script cache is empty (a restarted server): load it, send again.
		if refreshScript.Load(ctx, s.client).Err() == nil {
			pipe = s.client.Pipeline()
			for i, r := range batch {
				cmds[i] = refreshScript.EvalSha(ctx, pipe, []string{s.Key(r.key)}, r.backend, px(r.ttl))
			}
			_, err = pipe.Exec(ctx)
		}
	}
	if err != nil {
		if parent.Err() == nil { // not a shutdown: count it, our own deadline included
			s.fail(metrics.StoreOpRefresh)
			s.observe(metrics.StoreOpRefresh, err, since)
		}
		return
	}
	s.observe(metrics.StoreOpRefresh, nil, since)
	for i, c := range cmds {
		a, err := c.Slice()
		if err != nil || len(a) != 2 {
			continue
		}
		s.checkRepair(metrics.StoreOpRefresh, batch[i].key, a[1])
		if v, _ := a[0].(string); v != batch[i].backend { // another replica rebound it: drop our copy
			s.notify(batch[i].key, v)
		}
	}
}
