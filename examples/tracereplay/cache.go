package main

// prefixCache is an LRU cache of prefix blocks with prefix semantics, modelled on vLLM's
// automatic prefix caching: a block is reusable only if every earlier block of the
// request is cached too. Capacity is in blocks; not safe for concurrent use.
//
// Recency: a request touches its blocks from last to first, so its first block is the
// most recent; eviction (from the least-recent end) therefore drops the tails of old
// prompts before their heads, as vLLM frees a finished request's blocks tail first.
type prefixCache struct {
	capacity int
	index    map[int64]int32 // block hash -> entry
	entries  []cacheEntry    // arena; entries[0] is the list sentinel
	free     []int32
}

type cacheEntry struct {
	key        int64
	prev, next int32
}

func newPrefixCache(capacity int) *prefixCache {
	c := &prefixCache{capacity: capacity, index: make(map[int64]int32, capacity)}
	c.entries = append(c.entries, cacheEntry{}) // sentinel: next = MRU, prev = LRU
	return c
}

// Len returns the number of cached blocks.
func (c *prefixCache) Len() int { return len(c.index) }

// Peek returns how many leading blocks are cached, without touching recency.
func (c *prefixCache) Peek(blocks []int64) int {
	for k, h := range blocks {
		if _, ok := c.index[h]; !ok {
			return k
		}
	}
	return len(blocks)
}

// Access serves a request: it returns the number of leading blocks that were cached
// (the reused prefix) and then caches all blocks of the request, most recent first. A
// request longer than the capacity keeps its first capacity blocks.
func (c *prefixCache) Access(blocks []int64) int {
	k := c.Peek(blocks)
	if c.capacity <= 0 {
		return k
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		c.touch(blocks[i])
	}
	return k
}

// Reset drops every block (a restarted backend comes back cold).
func (c *prefixCache) Reset() {
	clear(c.index)
	c.entries = c.entries[:1]
	c.entries[0] = cacheEntry{}
	c.free = c.free[:0]
}

func (c *prefixCache) touch(h int64) {
	if e, ok := c.index[h]; ok {
		c.unlink(e)
		c.pushFront(e)
		return
	}
	if len(c.index) >= c.capacity {
		lru := c.entries[0].prev
		c.unlink(lru)
		delete(c.index, c.entries[lru].key)
		c.free = append(c.free, lru)
	}
	var e int32
	if n := len(c.free); n > 0 {
		e, c.free = c.free[n-1], c.free[:n-1]
	} else {
		c.entries = append(c.entries, cacheEntry{})
		e = int32(len(c.entries) - 1)
	}
	c.entries[e].key = h
	c.index[h] = e
	c.pushFront(e)
}

func (c *prefixCache) unlink(e int32) {
	p, n := c.entries[e].prev, c.entries[e].next
	c.entries[p].next = n
	c.entries[n].prev = p
}

func (c *prefixCache) pushFront(e int32) {
	first := c.entries[0].next
	c.entries[e].prev = 0
	c.entries[e].next = first
	c.entries[first].prev = e
	c.entries[0].next = e
}
