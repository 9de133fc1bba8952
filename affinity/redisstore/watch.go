package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/metrics"
)

// Watch implements [affinity.Store.Watch]. A Store serves one Scheduler at a time: fn
// replaces the function registered before, so a gateway that rebuilds its Scheduler
// (a reload) hands the same Store to the new one, which takes over the invalidations.
func (s *Store) Watch(fn func(key affinity.StoreKey, backendID string)) {
	s.mu.Lock()
	s.watch = fn
	s.mu.Unlock()
}

func (s *Store) notify(key affinity.StoreKey, backend string) {
	s.mu.Lock()
	fn := s.watch
	s.mu.Unlock()
	if fn != nil {
		fn(key, backend)
	}
}

// subscribe delivers invalidations until ctx ends. go-redis reconnects and resubscribes
// after a connection loss; messages published meanwhile are lost (a stale local copy is
// then corrected by the next refresh of that session, at most TTL/8 later).
func (s *Store) subscribe(ctx context.Context, ps *redis.PubSub) {
	defer s.done.Done()
	for {
		since := s.begin()
		m, err := ps.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.fail(metrics.StoreOpWatch)
			s.observe(metrics.StoreOpWatch, err, since)
			select { // go-redis reconnects on the next receive; do not spin meanwhile
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.retryAfter):
			}
			continue
		}
		msg, ok := m.(*redis.Message)
		if !ok {
			if _, sub := m.(*redis.Subscription); sub { // (re)subscribed: Redis answers
				s.observe(metrics.StoreOpWatch, nil, since)
			}
			continue // also a Pong
		}
		if strings.HasPrefix(msg.Payload, "!") { // a Sync marker
			s.mu.Lock()
			if ch, ok := s.syncs[msg.Payload]; ok {
				close(ch)
				delete(s.syncs, msg.Payload)
			}
			s.mu.Unlock()
			continue
		}
		if key, backend, ok := parseMessage(msg.Payload); ok {
			s.received.Add(1)
			s.notify(key, backend)
		}
	}
}

// Sync returns once every invalidation published (by any replica) before the call has
// been delivered to this store's Watch functions: it publishes a marker on the channel
// and waits for it (Redis delivers one connection's messages in publication order).
// For tests and for measuring the invalidation delay; it costs one round trip plus the
// delivery.
func (s *Store) Sync(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.mu.Lock()
	s.syncSeq++
	marker := "!" + s.self + ":" + strconv.FormatUint(s.syncSeq, 10)
	ch := make(chan struct{})
	s.syncs[marker] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.syncs, marker)
		s.mu.Unlock()
	}()
	// Published again every 100 ms: after a reconnect the subscription may not be back
	// yet, and a message published before it is lost.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := s.client.Publish(ctx, s.channel, marker).Err(); err != nil && ctx.Err() != nil {
			return err
		}
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
