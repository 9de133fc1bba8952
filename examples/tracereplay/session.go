package main

import (
	"math"
	"sort"
)

// globalPrefixShare is the share of requests that must start with a block sequence for
// it to count as the global prefix (the shared system prompt): "almost all" requests.
const globalPrefixShare = 0.9

// GlobalPrefix returns the longest block sequence that at least 90 % of the requests
// start with (in the Mooncake conversation trace: block 0, sent by every request). These
// blocks say nothing about which conversation a request belongs to, so the session rule
// and the cache-aware reference ignore them. Cost O(len(reqs) * len(result)).
func GlobalPrefix(reqs []Request) []int64 {
	need := int(globalPrefixShare * float64(len(reqs)))
	if len(reqs) == 0 || need < 1 {
		return nil
	}
	var prefix []int64
	for pos := 0; ; pos++ {
		counts := map[int64]int{}
		for i := range reqs {
			r := &reqs[i]
			if len(r.Blocks) > pos && hasPrefix(r.Blocks, prefix) {
				counts[r.Blocks[pos]]++
			}
		}
		best, bestN := int64(0), 0
		for h, n := range counts {
			if n > bestN || (n == bestN && h < best) {
				best, bestN = h, n
			}
		}
		if bestN < need {
			return prefix
		}
		prefix = append(prefix, best)
	}
}

func hasPrefix(blocks, prefix []int64) bool {
	if len(blocks) < len(prefix) {
		return false
	}
	for i, h := range prefix {
		if blocks[i] != h {
			return false
		}
	}
	return true
}

// Sessions is the reconstructed session structure of a trace.
//
// The rule: walking requests in time order, a request joins the session of the latest
// earlier request that shares at least one full (512-token) block beyond the global
// prefix (see [GlobalPrefix]); otherwise it opens a new session. Because a hash id
// identifies its whole prefix, sharing any block means sharing the prefix up to it. Only
// full blocks count: a partial last block is not reused by the next turn.
type Sessions struct {
	// Of[i] is the session index (0-based, in order of first appearance) of request i.
	Of []int
	// Prev[i] is the index of the previous request of the same session, or -1 for the
	// first turn of a session.
	Prev []int
	// Count is the number of sessions.
	Count int
	// Continuing is the number of requests with Prev[i] >= 0 (continuing turns).
	Continuing int
}

// ReconstructSessions applies the session rule to reqs (sorted by time). global is the
// global prefix to ignore (usually GlobalPrefix(reqs)). Cost O(total blocks).
func ReconstructSessions(reqs []Request, global []int64) *Sessions {
	ignore := make(map[int64]bool, len(global))
	for _, h := range global {
		ignore[h] = true
	}
	s := &Sessions{Of: make([]int, len(reqs)), Prev: make([]int, len(reqs))}
	latestWith := make(map[int64]int, 1<<16) // full block -> latest request holding it
	lastOf := []int{}                        // session -> its latest request
	for i := range reqs {
		r := &reqs[i]
		full := r.FullBlocks()
		join := -1
		for _, h := range r.Blocks[:full] {
			if ignore[h] {
				continue
			}
			if j, ok := latestWith[h]; ok && j > join {
				join = j
			}
		}
		if join < 0 {
			s.Of[i] = s.Count
			s.Prev[i] = -1
			lastOf = append(lastOf, i)
			s.Count++
		} else {
			sid := s.Of[join]
			s.Of[i] = sid
			s.Prev[i] = lastOf[sid]
			lastOf[sid] = i
			s.Continuing++
		}
		for _, h := range r.Blocks[:full] {
			if !ignore[h] {
				latestWith[h] = i
			}
		}
	}
	return s
}

// HistogramBucket is one row of the turns-per-session histogram.
type HistogramBucket struct {
	Label    string // "1", "2", …, "6-10", "11-20", "21+"
	Sessions int
	Turns    int
}

// TurnsHistogram buckets sessions by their number of turns.
func (s *Sessions) TurnsHistogram() []HistogramBucket {
	turns := make([]int, s.Count)
	for _, sid := range s.Of {
		turns[sid]++
	}
	bounds := []struct {
		lo, hi int
		label  string
	}{{1, 1, "1"}, {2, 2, "2"}, {3, 3, "3"}, {4, 4, "4"}, {5, 5, "5"},
		{6, 10, "6-10"}, {11, 20, "11-20"}, {21, math.MaxInt, "21+"}}
	out := make([]HistogramBucket, len(bounds))
	for i, b := range bounds {
		out[i].Label = b.label
	}
	for _, t := range turns {
		i := sort.Search(len(bounds), func(i int) bool { return bounds[i].hi >= t })
		out[i].Sessions++
		out[i].Turns += t
	}
	return out
}

// MaxTurns returns the length of the longest session.
func (s *Sessions) MaxTurns() int {
	turns := make([]int, s.Count)
	m := 0
	for _, sid := range s.Of {
		turns[sid]++
		m = max(m, turns[sid])
	}
	return m
}
