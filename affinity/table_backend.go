package affinity

import (
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// tierTally aggregates per-tier counts while a lock is held, to report them after.
type tierTally struct {
	list  []tierCount
	last  int
	touch uint32 // a sum of what deleteBackend loads ahead, so that those loads are kept
}

type tierCount struct {
	tier string
	n    int
}

func (tt *tierTally) add(tier string) {
	if tt.last < len(tt.list) && tt.list[tt.last].tier == tier {
		tt.list[tt.last].n++
		return
	}
	for i := range tt.list {
		if tt.list[i].tier == tier {
			tt.list[i].n++
			tt.last = i
			return
		}
	}
	tt.last = len(tt.list)
	tt.list = append(tt.list, tierCount{tier: tier, n: 1})
}

// downBatch is how many bindings deleteBackend takes off a backend's list at a time.
const downBatch = 128

// deleteBackend removes every binding to id, counting valid ones as broken{reason} when
// reason != 0, and returns the count and the per-tier tally.
//
// Each binding removed costs several cache misses: its entry, its key's bytes (hashed to
// find its index slot), its index slot, its LRU neighbours. Removing while walking the
// backend's list leaves little room for the CPU to overlap them with the next step of
// the walk (each step waits on the previous entry). So the list is taken in batches of
// downBatch: a first loop walks it, hashes each key and loads the lines the removal will
// need (the index slot and both LRU neighbours) without waiting on them; only the walk's
// own loads depend on each other, the rest overlap. A second loop then removes the
// batch in list order, its lines in cache. Same removals, same order, as one walk.
func (t *Table) deleteBackend(id string, reason metrics.Reason) (int, tierTally) {
	var tally tierTally
	var batch, hashes [downBatch]uint32
	total := 0
	now := t.clock.now()
	pre := premix(hrw.NodeHash(id))
	for s := range t.shards {
		sh := &t.shards[s]
		sh.mu.Lock()
		// Looked up under the shard's lock: a miss adds a new backend under it.
		e, si := t.reg.cur.Load().find(id, pre)
		if e == nil || !sh.holds(si) || !e.held() {
			sh.mu.Unlock()
			continue
		}
		sh.flush()
		valid, expired := 0, 0
		for i := sh.bk[si].head; i != 0; {
			n := 0
			for ; i != 0 && n < downBatch; n++ {
				batch[n] = i
				e := sh.at(i)
				i = e.bnext
				h := uint32(hrw.KeyHash(sessionOf(e.key)))
				hashes[n] = h
				tally.touch += uint32(sh.idx.slots[sh.idx.home(h)]) + sh.at(e.prev).prev + sh.at(e.next).next
			}
			for k, j := range batch[:n] {
				e := sh.at(j)
				if now-e.lastUse >= t.ttls[e.class] {
					expired++
				} else {
					valid++
					if reason != 0 {
						tally.add(tierOf(e.key))
					}
				}
				sh.removeHashed(j, hashes[k]) // may free the slot once i is 0
			}
		}
		sh.c.expired += uint64(expired)
		sh.c.broken[reason] += uint64(valid)
		sh.mu.Unlock()
		total += valid
	}
	return total, tally
}
