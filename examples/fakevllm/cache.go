package fakevllm

import (
	"container/list"
	"crypto/sha256"
	"sync"
)

// blockKey identifies one full prompt block together with everything before it:
// key[i] = SHA-256(key[i-1] || bytes of block i), key[-1] = 32 zero bytes, or
// SHA-256("cache_salt" 0x00 salt) for a request with a cache_salt (as vLLM mixes the
// salt into the first block's hash, requests with different salts share no block).
type blockKey [sha256.Size]byte

// blockKeys returns the hash chain of the full blocks of prompt (a trailing partial block
// has no key). blockBytes = BlockTokens * BytesPerToken.
func blockKeys(prompt string, blockBytes int, salt string) []blockKey {
	n := len(prompt) / blockBytes
	if n == 0 {
		return nil
	}
	keys := make([]blockKey, n)
	buf := make([]byte, 0, sha256.Size+blockBytes)
	var prev blockKey
	if salt != "" {
		prev = sha256.Sum256([]byte("cache_salt\x00" + salt))
	}
	for i := range n {
		buf = append(buf[:0], prev[:]...)
		buf = append(buf, prompt[i*blockBytes:(i+1)*blockBytes]...)
		prev = sha256.Sum256(buf)
		keys[i] = prev
	}
	return keys
}

// prefixCache is the automatic prefix cache: an LRU set of block keys bounded by capacity.
// Touching a request's blocks walks them last to first, so the first block of a prompt is
// the most recently used and tail blocks are evicted before the prefix they extend (as
// vLLM frees a request's blocks in reverse order). Safe for concurrent use.
type prefixCache struct {
	mu        sync.Mutex
	capacity  int
	ll        list.List // of blockKey, front = most recently used
	index     map[blockKey]*list.Element
	evictions uint64
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{capacity: capacity, index: make(map[blockKey]*list.Element)}
}

// lookup returns how many leading blocks of keys are cached (at most limit) and marks
// those blocks as recently used. Prefix semantics: it stops at the first missing block.
func (c *prefixCache) lookup(keys []blockKey, limit int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	hit := 0
	for hit < len(keys) && hit < limit {
		if _, ok := c.index[keys[hit]]; !ok {
			break
		}
		hit++
	}
	for i := hit - 1; i >= 0; i-- {
		c.ll.MoveToFront(c.index[keys[i]])
	}
	return hit
}

// insert adds (or refreshes) every block of keys, evicting least recently used blocks
// beyond capacity. It returns the number of blocks evicted.
func (c *prefixCache) insert(keys []blockKey) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	evicted := 0
	for i := len(keys) - 1; i >= 0; i-- {
		if e, ok := c.index[keys[i]]; ok {
			c.ll.MoveToFront(e)
			continue
		}
		c.index[keys[i]] = c.ll.PushFront(keys[i])
		if c.ll.Len() > c.capacity {
			last := c.ll.Back()
			c.ll.Remove(last)
			delete(c.index, last.Value.(blockKey))
			evicted++
		}
	}
	c.evictions += uint64(evicted)
	return evicted
}

func (c *prefixCache) stats() (blocks int, evictions uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len(), c.evictions
}
