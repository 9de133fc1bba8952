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
	s.observe("claim", nil, s.begin()) // a call started after the outage answers: recovering
	assert.Equal(t, "WARN", buf.levels(), "one answer after an outage is not yet a recovery")
	during2 := s.begin()
	s.observe("claim", nil, s.begin()) // and the next one: up
	assert.Equal(t, "WARN INFO", buf.levels())
	s.observe("claim", fail, during) // started during the outage, failed late: no new outage
	s.observe("claim", fail, during2)
	assert.Equal(t, "WARN INFO", buf.levels())
	s.observe("claim", context.Canceled, s.begin()) // a cancellation is no outcome
	assert.Equal(t, "WARN INFO", buf.levels())
	s.observe("claim", fail, s.begin())
	assert.Equal(t, "WARN INFO WARN", buf.levels(), "a fresh call's failure is a new outage")
}

// After a Redis restart the first answer may be followed by a failure (tester36 saw
// INFO, WARN, INFO within 117 ms): Redis is back in the log only once two calls in a row
// answered, the second started after the first answered; a failure between them is the
// same outage. Startup logs nothing (the first outcome), and "available again" only
// follows an outage that was logged or a first outcome that failed (Ping at startup).
func TestObserveDoesNotFlapOnRecovery(t *testing.T) {
	fail := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	for _, tc := range []struct {
		name string
		seq  string // outcomes in order: '+' success, '-' failure, each started after the previous one
		want string
	}{
		{"startup ok", "+++", ""},
		{"startup down, then back", "-++", "INFO"},
		{"startup down, one answer", "-+", ""},
		{"outage and recovery", "+-++", "WARN INFO"},
		{"restart flap", "+-+-++", "WARN INFO"},
		{"long flap", "+-+-+-+-++", "WARN INFO"},
		{"two outages", "+-+++-++", "WARN INFO WARN INFO"},
		{"one answer, then down again", "+-+--", "WARN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf lockedBuffer
			s := &Store{log: slog.New(slog.NewTextHandler(&buf, nil))}
			for _, c := range tc.seq {
				var err error
				if c == '-' {
					err = fail
				}
				s.observe("claim", err, s.begin())
			}
			assert.Equal(t, tc.want, buf.levels())
		})
	}
}
