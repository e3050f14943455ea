package engine

// CacheEventKind says what a CacheEvent reports.
type CacheEventKind uint8

// Cache event kinds, vLLM's KV events.
const (
	// CacheStored: blocks became cached (vLLM's BlockStored).
	CacheStored CacheEventKind = iota + 1
	// CacheRemoved: cached blocks were evicted (vLLM's BlockRemoved).
	CacheRemoved
	// CacheCleared: the replica's cache was emptied (vLLM's
	// AllBlocksCleared).
	CacheCleared
)

func (k CacheEventKind) String() string {
	switch k {
	case CacheStored:
		return "BlockStored"
	case CacheRemoved:
		return "BlockRemoved"
	case CacheCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// CacheEvent is one change to a replica's prefix cache, as vLLM's KV
// events report them: a block is stored when a prefill completes and
// registers it, removed when it is evicted to make room, and every block
// is cleared when the engine starts and on Reset.
type CacheEvent struct {
	Kind    CacheEventKind
	Replica int
	// Hashes are the blocks stored or removed, in order. A stored run is
	// a chain: each block's prefix ends with the one before it.
	Hashes []uint64
	// Parent is the block before the first stored one when HasParent;
	// a run that starts the prompt has none. CacheStored only.
	Parent    uint64
	HasParent bool

	from, to int // Hashes are cacheLog.hashes[from:to] until handed out
}

// cacheLog records cache events between two Engine.CacheEvents calls. Its
// hashes are one flat slice the events index, so recording allocates
// nothing once the slices have grown to a round's size.
type cacheLog struct {
	events []CacheEvent
	hashes []uint64
}

// stored records that replica stored block h, whose parent is parent when
// hasParent. A block continuing the last recorded run (its parent is that
// run's last block) extends it.
func (l *cacheLog) stored(replica int, parent uint64, hasParent bool, h uint64) {
	if n := len(l.events); n > 0 && hasParent {
		last := &l.events[n-1]
		if last.Kind == CacheStored && last.Replica == replica && last.to == len(l.hashes) && l.hashes[last.to-1] == parent {
			l.hashes = append(l.hashes, h)
			last.to++
			return
		}
	}
	l.hashes = append(l.hashes, h)
	l.events = append(l.events, CacheEvent{Kind: CacheStored, Replica: replica, Parent: parent, HasParent: hasParent,
		from: len(l.hashes) - 1, to: len(l.hashes)})
}

// removed records that replica evicted block h; consecutive evictions of
// one replica make one event.
func (l *cacheLog) removed(replica int, h uint64) {
	if n := len(l.events); n > 0 {
		last := &l.events[n-1]
		if last.Kind == CacheRemoved && last.Replica == replica && last.to == len(l.hashes) {
			l.hashes = append(l.hashes, h)
			last.to++
			return
		}
	}
	l.hashes = append(l.hashes, h)
	l.events = append(l.events, CacheEvent{Kind: CacheRemoved, Replica: replica, from: len(l.hashes) - 1, to: len(l.hashes)})
}

// cleared records that replica's cache was emptied.
func (l *cacheLog) cleared(replica int) {
	l.events = append(l.events, CacheEvent{Kind: CacheCleared, Replica: replica, from: len(l.hashes), to: len(l.hashes)})
}

// CacheEvents returns the changes to the replicas' prefix caches since the
// previous call, in the order they happened, or nil unless
// Config.CacheEvents is set. The returned slice and its events' Hashes are
// reused by the next call; copy what must outlive it.
func (e *Engine) CacheEvents() []CacheEvent {
	l := e.clog
	if l == nil || len(l.events) == 0 {
		return nil
	}
	out, hashes := l.events, l.hashes
	for i := range out {
		out[i].Hashes = hashes[out[i].from:out[i].to:out[i].to]
	}
	// Double buffering: the next round records into the other pair.
	l.events, l.hashes = e.clogPrev.events[:0], e.clogPrev.hashes[:0]
	e.clogPrev.events, e.clogPrev.hashes = out, hashes
	return out
}
