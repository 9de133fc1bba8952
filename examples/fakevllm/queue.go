package fakevllm

import (
	"container/list"
	"context"
	"sync"
)

// slots admits at most max running sequences; the rest wait in strict FIFO order. A slot
// released while someone waits is handed to the head of the queue directly. Safe for
// concurrent use.
type slots struct {
	mu      sync.Mutex
	max     int
	running int
	waiting list.List // of chan struct{}, closed when granted
}

// acquire blocks until a slot is granted or ctx is done. On ctx done it leaves the queue
// (or gives back a slot granted concurrently) and returns ctx.Err().
func (s *slots) acquire(ctx context.Context) error {
	s.mu.Lock()
	if s.running < s.max && s.waiting.Len() == 0 {
		s.running++
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	e := s.waiting.PushBack(ch)
	s.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-ch: // granted between ctx.Done and the lock: pass the slot on.
		s.mu.Unlock()
		s.release()
	default:
		s.waiting.Remove(e)
		s.mu.Unlock()
	}
	return ctx.Err()
}

// release frees a slot held by the caller.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.waiting.Front(); f != nil {
		s.waiting.Remove(f)
		close(f.Value.(chan struct{}))
		return
	}
	s.running--
}

func (s *slots) counts() (running, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.waiting.Len()
}
