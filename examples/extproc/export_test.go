package extproc

import "time"

// WithTimer replaces the body read timeout's timer (tests: a fake clock).
func WithTimer(f func(time.Duration) (<-chan time.Time, func() bool)) Option {
	return func(s *Server) { s.timer = f }
}
