package redisstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) levels() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.Lines(l.b.String()) {
		switch {
		case strings.Contains(line, "level=WARN"):
			out = append(out, "WARN")
		case strings.Contains(line, "level=INFO"):
			out = append(out, "INFO")
		}
	}
	return strings.Join(out, " ")
}

// Calls in flight when Redis is seen failing (or answering again) cannot change the
// availability back: only a call that started after the last change can make the next
// one. Before, a burst of calls finishing either way around a 50 ms timeout logged
// 11 WARN and 10 INFO lines within 51 ms (tester21).
func TestObserveIgnoresCallsInFlightAtAChange(t *testing.T) {
	var buf lockedBuffer
	// A Store without New's background goroutines: its subscriber, failing to reach the
	// address, would observe outcomes of its own between the test's calls.
	s := &Store{log: slog.New(slog.NewTextHandler(&buf, nil))}
	s.cfg.Address = "127.0.0.1:1"
	fail := errors.New("i/o timeout")

	s.observe("claim", nil, s.begin()) // the first outcome: up, not logged
	inflight := []uint64{s.begin(), s.begin(), s.begin()}
	s.observe("claim", fail, inflight[0]) // down
	assert.Equal(t, "WARN", buf.levels())
	s.observe("claim", nil, inflight[1]) // started before the failure was seen: no recovery
	s.observe("claim", fail, inflight[2])
	assert.Equal(t, "WARN", buf.levels(), "calls in flight at the change change nothing")

	during := s.begin()
	s.observe("claim", nil, s.begin()) // a call started after the outage answers: up
	assert.Equal(t, "WARN INFO", buf.levels())
	s.observe("claim", fail, during) // started during the outage, failed late: no new outage
	assert.Equal(t, "WARN INFO", buf.levels())
	s.observe("claim", context.Canceled, s.begin()) // a cancellation is no outcome
	assert.Equal(t, "WARN INFO", buf.levels())
	s.observe("claim", fail, s.begin())
	assert.Equal(t, "WARN INFO WARN", buf.levels(), "a fresh call's failure is a new outage")
}
