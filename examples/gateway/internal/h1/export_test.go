package h1

import "time"

// SetClock makes s's sweeper tick on ticks and read the time from now (tests).
func SetClock(s *Server, ticks <-chan time.Time, now func() time.Time) {
	s.testTicks, s.testNow = ticks, now
}
