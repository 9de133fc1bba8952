package affinity

// index maps binding keys to entry indices for one shard: an open-addressing hash table
// with linear probing and backward-shift deletion (no tombstones), 8 bytes per slot,
// load factor at most 3/4. It replaces a map[string]uint32, which would hash every key a
// second time (the shard is already chosen by hrw.KeyHash of the session ID) and cost
// about 2.5x the memory per binding.
//
// A slot is 0 when empty, else uint64(h)<<32 | i, where i > 0 is the entry index and h the
// low 32 bits of hrw.KeyHash(sessionID): its home slot (h & mask) and a fingerprint that
// spares most key comparisons. Bindings of one session in several tiers share h and are
// told apart by comparing keys.
type index struct {
	slots []uint64
	n     int
}

func (x *index) home(h uint32) int { return int(h) & (len(x.slots) - 1) }

// find returns the entry index whose key is (tier, session) (0 if none). It compares the
// stored key in place: no key is built for a lookup.
func (x *index) find(sh *shard, h uint32, tier, session string) uint32 {
	if len(x.slots) == 0 {
		return 0
	}
	mask := len(x.slots) - 1
	for p := int(h) & mask; ; p = (p + 1) & mask {
		s := x.slots[p]
		if uint32(s) == 0 {
			return 0
		}
		if uint32(s>>32) == h && keyIs(sh.at(uint32(s)).key, tier, session) {
			return uint32(s)
		}
	}
}

// add inserts entry i with hash h (the key must be absent). O(1) amortized; doubling
// copies the slots (no rehash: the home slot is derived from the stored h).
func (x *index) add(h uint32, i uint32) {
	if (x.n+1)*4 > len(x.slots)*3 {
		x.grow()
	}
	mask := len(x.slots) - 1
	p := int(h) & mask
	for uint32(x.slots[p]) != 0 {
		p = (p + 1) & mask
	}
	x.slots[p] = uint64(h)<<32 | uint64(i)
	x.n++
}

func (x *index) grow() {
	old := x.slots
	size := 16
	if len(old) > 0 {
		size = 2 * len(old)
	}
	x.slots = make([]uint64, size)
	mask := size - 1
	for _, s := range old {
		if uint32(s) == 0 {
			continue
		}
		p := int(s>>32) & mask
		for uint32(x.slots[p]) != 0 {
			p = (p + 1) & mask
		}
		x.slots[p] = s
	}
}

// del removes entry i, which has hash h and must be present.
func (x *index) del(h uint32, i uint32) {
	mask := len(x.slots) - 1
	p := int(h) & mask
	for uint32(x.slots[p]) != i {
		p = (p + 1) & mask
	}
	// Backward-shift: move later members of the probe run into the hole when their home
	// slot does not lie cyclically in (hole, j].
	hole := p
	for j := (p + 1) & mask; uint32(x.slots[j]) != 0; j = (j + 1) & mask {
		if stays(hole, int(x.slots[j]>>32)&mask, j) {
			continue
		}
		x.slots[hole] = x.slots[j]
		hole = j
	}
	x.slots[hole] = 0
	x.n--
}

// stays reports whether, in a backward-shift deletion, the member at position j whose
// home position is k stays where it is: k lies cyclically in (hole, j]. Otherwise it
// moves into the hole.
func stays(hole, k, j int) bool {
	if hole <= j {
		return hole < k && k <= j
	}
	return hole < k || k <= j
}
