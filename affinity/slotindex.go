package affinity

// slotIndex finds a shard's backend slot (shard.slots) by the backend's premixed node
// hash (backendSlot.pre): an
// open-addressing table with linear probing and backward-shift deletion, 4 bytes per
// position, load factor at most 1/2. A position is 0 when empty, else the slot's index
// + 1; the slot's own hash gives its home position (its low bits) and is compared before
// its ID. It replaces a map[string]uint32, which hashed the ID string again on every
// insert (the node hash comes with the candidate) and took about four times the memory.
type slotIndex struct {
	pos []uint32
	n   int
}

// find returns the index of the slot of backend id, whose premixed node hash is pre, or
// false.
func (x *slotIndex) find(slots []backendSlot, pre uint64, id string) (uint32, bool) {
	if len(x.pos) == 0 {
		return 0, false
	}
	mask := uint64(len(x.pos) - 1)
	for p := pre & mask; ; p = (p + 1) & mask {
		v := x.pos[p]
		if v == 0 {
			return 0, false
		}
		if s := &slots[v-1]; s.pre == pre && s.id == id {
			return v - 1, true
		}
	}
}

// add records slot si, whose pre is set and which must be absent. O(1) amortized.
func (x *slotIndex) add(slots []backendSlot, si uint32) {
	if 2*(x.n+1) > len(x.pos) {
		old := x.pos
		x.pos = make([]uint32, max(16, 2*len(old)))
		for _, v := range old {
			if v != 0 {
				x.put(slots[v-1].pre, v)
			}
		}
	}
	x.put(slots[si].pre, si+1)
	x.n++
}

func (x *slotIndex) put(pre uint64, v uint32) {
	mask := uint64(len(x.pos) - 1)
	p := pre & mask
	for x.pos[p] != 0 {
		p = (p + 1) & mask
	}
	x.pos[p] = v
}

// del removes slot si, which must be present and still hold its pre.
func (x *slotIndex) del(slots []backendSlot, si uint32) {
	mask := len(x.pos) - 1
	p := int(slots[si].pre) & mask
	for x.pos[p] != si+1 {
		p = (p + 1) & mask
	}
	hole := p
	for j := (p + 1) & mask; x.pos[j] != 0; j = (j + 1) & mask {
		if stays(hole, int(slots[x.pos[j]-1].pre)&mask, j) {
			continue
		}
		x.pos[hole] = x.pos[j]
		hole = j
	}
	x.pos[hole] = 0
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
