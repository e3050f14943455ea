package engine

// blockCache is one replica's KV cache: capacity blocks, of which used are
// held by admitted sequences; hashed blocks whose last holder finished stay
// cached in an LRU list until a new allocation needs their space. This is
// vLLM's automatic prefix caching, with blocks identified by the hash of
// their cumulative prefix. Invariant: used + lru.n <= capacity.
type blockCache struct {
	capacity int
	used     int
	byHash   map[uint64]*block
	lru      blockList // ref == 0, oldest at head
	spare    []*block  // recycled entries
	// stored and evicted count blocks registered and evicted.
	stored, evicted int64
	// log, when not nil, records the changes as replica's.
	log     *cacheLog
	replica int
}

type block struct {
	hash       uint64
	ref        int32
	prev, next *block
}

type blockList struct {
	head, tail *block
	n          int
}

func (l *blockList) pushBack(b *block) {
	b.prev, b.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = b
	} else {
		l.head = b
	}
	l.tail = b
	l.n++
}

func (l *blockList) remove(b *block) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		l.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		l.tail = b.prev
	}
	b.prev, b.next = nil, nil
	l.n--
}

func newBlockCache(capacity, replica int, log *cacheLog) *blockCache {
	c := &blockCache{capacity: capacity, byHash: make(map[uint64]*block), log: log, replica: replica}
	if log != nil {
		log.cleared(replica) // an engine starts with nothing cached
	}
	return c
}

// reset empties the cache (no block may be held) and keeps its counters.
func (c *blockCache) reset() {
	for _, b := range c.byHash {
		*b = block{}
		c.spare = append(c.spare, b)
	}
	clear(c.byHash)
	c.lru, c.used = blockList{}, 0
	if c.log != nil {
		c.log.cleared(c.replica)
	}
}

// match returns how many leading hashes are cached (held or in the LRU),
// looking at no more than limit of them.
func (c *blockCache) match(hashes []uint64, limit int) int {
	n := 0
	for n < limit && n < len(hashes) {
		if _, ok := c.byHash[hashes[n]]; !ok {
			break
		}
		n++
	}
	return n
}

// lookup appends to held the cached blocks of the leading hashes (at most
// limit) and counts how many of them sit in the LRU (ref 0) and would leave
// the free pool when reused. It takes no references: see acquire.
func (c *blockCache) lookup(hashes []uint64, limit int, held []*block) (_ []*block, revive int) {
	for i := 0; i < limit && i < len(hashes); i++ {
		b, ok := c.byHash[hashes[i]]
		if !ok {
			break
		}
		if b.ref == 0 {
			revive++
		}
		held = append(held, b)
	}
	return held, revive
}

// fits reports whether fresh new blocks plus revive cached blocks can be
// taken now.
func (c *blockCache) fits(fresh, revive int) bool {
	return c.used+fresh+revive <= c.capacity
}

// acquire takes references on the blocks found by lookup and allocates
// fresh private blocks, evicting LRU blocks as needed. The caller checked
// fits.
func (c *blockCache) acquire(held []*block, fresh int) {
	for _, b := range held {
		if b.ref == 0 {
			c.lru.remove(b)
			c.used++
		}
		b.ref++
	}
	c.used += fresh
	for c.used+c.lru.n > c.capacity {
		c.evict()
	}
}

func (c *blockCache) evict() {
	b := c.lru.head
	c.lru.remove(b)
	delete(c.byHash, b.hash)
	c.spare = append(c.spare, b)
	c.evicted++
	if c.log != nil {
		c.log.removed(c.replica, b.hash)
	}
}

// register turns one private block of a sequence into a cached block for
// hash h, held by that sequence; parent is the hash of the block before it
// in the prompt when hasParent. It returns nil when h is already cached
// (another sequence computed it first), in which case the block stays
// private.
func (c *blockCache) register(h, parent uint64, hasParent bool) *block {
	if _, ok := c.byHash[h]; ok {
		return nil
	}
	var b *block
	if n := len(c.spare); n > 0 {
		b = c.spare[n-1]
		c.spare = c.spare[:n-1]
	} else {
		b = new(block)
	}
	b.hash, b.ref = h, 1
	c.byHash[h] = b
	c.stored++
	if c.log != nil {
		c.log.stored(c.replica, parent, hasParent, h)
	}
	return b
}

// release drops a sequence's references: private blocks are freed, held
// blocks whose last reference goes move to the LRU tail.
func (c *blockCache) release(held []*block, private int) {
	c.used -= private
	for _, b := range held {
		b.ref--
		if b.ref == 0 {
			c.used--
			c.lru.pushBack(b)
		}
	}
}
