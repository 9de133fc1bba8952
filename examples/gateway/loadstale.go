package gateway

import "time"

// How a stale episode of a backend's load report ends (decision, small2; tester38
// finding 3 saw the gauge fall 642 -> 390 -> 0 as backends went Down with no line saying
// so): each end is logged at Info, whichever way it comes, and the gauge
// ([MetricLoadReportsStale]) drops the backend at once.
const (
	endFresh   = iota // a scrape succeeded: "backend load reports fresh again"
	endDown           // the backend went Down: not scraped, so not expected to report
	endRemoved        // a reload removed the backend or changed its URL
	endReasons
)

// endedLogs are the Info lines of the ended episodes, by why (endFresh ...), and the
// value of their why field. The fourth end, load reports turned off, is logged by Run
// (logReportsOff).
var endedLogs = [endReasons]struct{ msg, why string }{
	endFresh:   {"backend load reports fresh again", "scrape succeeded"},
	endDown:    {"backend load reports no longer stale: backends Down, not scraped", "down"},
	endRemoved: {"backend load reports no longer stale: backends removed", "removed or URL changed"},
}

// setStale sets e.stale and keeps the count in step. Under s.mu.
func (s *loadScraper) setStale(e *scrapeEntry, v bool) {
	if e.stale != v {
		e.stale = v
		if v {
			s.staleNow++
		} else {
			s.staleNow--
		}
	}
}

// endStale ends the stale episode of e (backend id), if it is in one, for why (endFresh,
// endDown, endRemoved): the gauge drops it and its end is logged at the next pass. Under
// s.mu.
func (s *loadScraper) endStale(id string, e *scrapeEntry, why int) {
	if e.stale {
		s.setStale(e, false)
		s.ended[why] = append(s.ended[why], id)
	}
}

// takeLogs returns the backends newly stale and those whose episode ended, by why, to
// log: at most one line of each per interval, each listing at most staleLogIDs IDs (count
// gives them all). Those stale again by then are left out (an ended episode's backend
// that a reload removed, has no entry, and is logged). Under s.mu.
func (s *loadScraper) takeLogs(now time.Time, every time.Duration) (stale []string, ended [endReasons][]string) {
	take := func(ids *[]string, at *time.Time, want bool) []string {
		if len(*ids) == 0 || (!at.IsZero() && now.Sub(*at) < every) {
			return nil
		}
		var out []string
		seen := make(map[string]bool, len(*ids))
		for _, id := range *ids { // an ID twice: stale, fresh and stale again meanwhile
			e := s.byID[id]
			if (e == nil && !want || e != nil && e.stale == want) && !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
		*ids = (*ids)[:0]
		if len(out) > 0 {
			*at = now
		}
		return out
	}
	stale = take(&s.newStale, &s.warnedAt, true)
	for why := range ended {
		ended[why] = take(&s.ended[why], &s.endedAt[why], false)
	}
	return stale, ended
}

// logStaleEnded logs the ended episodes takeLogs returned, one Info line per why.
func (g *Gateway) logStaleEnded(ended [endReasons][]string) {
	for why, ids := range ended {
		if len(ids) > 0 {
			g.log.Info(endedLogs[why].msg, "backends", ids[:min(len(ids), staleLogIDs)], "count", len(ids), "why", endedLogs[why].why)
		}
	}
}

// logReportsOff logs the stale episodes that load reports turned off ended (the IDs
// loadScraper.reset returned): no report is expected any more.
func (g *Gateway) logReportsOff(ids []string) {
	if len(ids) > 0 {
		g.log.Info("backend load reports no longer stale: load reports turned off",
			"backends", ids[:min(len(ids), staleLogIDs)], "count", len(ids), "why", "load_report_seconds 0")
	}
}

// errorsOf returns the last scrape error of the first staleLogIDs of ids.
func (s *loadScraper) errorsOf(ids []string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string)
	for _, id := range ids[:min(len(ids), staleLogIDs)] {
		if err, ok := s.lastErr[id]; ok {
			out[id] = err
		}
	}
	return out
}
