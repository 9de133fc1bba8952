package affinity

import "github.com/agentserve/sessionaffinity/hrw"

// dropHashed removes the bindings whose session ID hashes to kh and whose tier hashes to
// tierHash, unless they are bound to keep, and returns how many it removed. It serves
// the invalidations of a shared Store, which knows keys by their hashes only. Counts
// nothing. Cost: one shard lock and a probe of the session's index run; the full hashes
// are compared only for entries whose 32-bit fingerprint matches.
func (t *Table) dropHashed(kh, tierHash uint64, keep string) int {
	sh := t.shardFor(kh)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for {
		i := sh.findHashed(kh, tierHash, keep)
		if i == 0 {
			return n
		}
		sh.remove(i) // remove shifts the probe run: search again from the home slot
		n++
	}
}

// findHashed returns an entry with session hash kh and tier hash tierHash not bound to
// keep (0 if none).
func (sh *shard) findHashed(kh, tierHash uint64, keep string) uint32 {
	x := &sh.idx
	if len(x.slots) == 0 {
		return 0
	}
	h := uint32(kh)
	mask := len(x.slots) - 1
	for p := int(h) & mask; ; p = (p + 1) & mask {
		s := x.slots[p]
		if uint32(s) == 0 {
			return 0
		}
		if uint32(s>>32) != h {
			continue
		}
		e := sh.at(uint32(s))
		if sh.idOf(e.slot) != keep && hrw.KeyHash(sessionOf(e.key)) == kh && hrw.KeyHash(tierOf(e.key)) == tierHash {
			return uint32(s)
		}
	}
}
