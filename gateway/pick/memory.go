package pick

import "sync/atomic"

// memory remembers, with bounded space and no locks, which engine last
// served each affinity key and which engines were last sent each prefix
// block (a block's hash covers the whole prompt up to its end, as an
// engine's prefix cache keys it). It is a hint store: entries are
// direct-mapped (a newer key that hashes to the same slot replaces an
// older one, so eviction is by recency) and expire after a TTL; an engine
// that went down is forgotten wholesale (State.Forget).
//
// An entry packs, in 64 bits, 24 bits of the hash (a check: the slot
// index carries the rest), a 16-bit time stamp in units of stampMs, and
// the engine's pool index + 1 in 24 bits (0: empty).
type memory struct {
	keys   []atomic.Uint64
	blocks []atomic.Uint64 // two ways per bucket: [2k] newest, [2k+1] the one before
	kmask  uint64
	bmask  uint64
	ttl    uint64 // in stamps
}

const (
	stampMs   = 1000
	stampBits = 16
	engBits   = 24
	tagBits   = 64 - stampBits - engBits
	// maxMemEngine bounds the pool indices memory can hold.
	maxMemEngine = 1<<engBits - 1
)

func newMemory(keyBits, blockBits uint, ttlMs int64) *memory {
	return &memory{
		keys:   make([]atomic.Uint64, 1<<keyBits),
		blocks: make([]atomic.Uint64, 2<<blockBits),
		kmask:  1<<keyBits - 1,
		bmask:  1<<blockBits - 1,
		ttl:    uint64(max(ttlMs/stampMs, 1)),
	}
}

func stampOf(nowMs int64) uint64 {
	return uint64(nowMs/stampMs) & (1<<stampBits - 1)
}

func pack(h uint64, stamp uint64, eng uint32) uint64 {
	return h>>(64-tagBits)<<(stampBits+engBits) | stamp<<engBits | uint64(eng)
}

// unpack returns the engine (pool index + 1) of entry x when it holds
// hash h and has not expired at stamp now (0 otherwise), and its stamp.
func (m *memory) unpack(x, h, now uint64) (eng uint32, stamp uint64) {
	if x>>(stampBits+engBits) != h>>(64-tagBits) {
		return 0, 0
	}
	stamp = x >> engBits & (1<<stampBits - 1)
	if (now-stamp)&(1<<stampBits-1) > m.ttl {
		return 0, 0
	}
	return uint32(x & maxMemEngine), stamp
}

// lastEngine returns the pool index + 1 of the engine that last served
// key (0: none remembered), and its stamp.
func (m *memory) lastEngine(key uint64, now uint64) (uint32, uint64) {
	h := mix(key ^ 0x6a09e667f3bcc908)
	return m.unpack(m.keys[h&m.kmask].Load(), h, now)
}

func (m *memory) rememberKey(key uint64, now uint64, eng uint32) {
	h := mix(key ^ 0x6a09e667f3bcc908)
	x := pack(h, now, eng)
	// A store is a locked instruction on amd64; most picks find the
	// entry they would write (the key's engine, this second) already there.
	if k := &m.keys[h&m.kmask]; k.Load() != x {
		k.Store(x)
	}
}

// holders returns the (up to two) engines remembered for block b.
func (m *memory) holders(b uint64, now uint64) (e0, e1 uint32, s0, s1 uint64) {
	h := mix(b)
	i := (h & m.bmask) * 2
	e0, s0 = m.unpack(m.blocks[i].Load(), h, now)
	e1, s1 = m.unpack(m.blocks[i+1].Load(), h, now)
	return
}

// rememberBlock records that block b was sent to eng: it becomes the
// newest holder, the previous newest (if another engine) the older one.
func (m *memory) rememberBlock(b uint64, now uint64, eng uint32) {
	h := mix(b)
	i := (h & m.bmask) * 2
	x := pack(h, now, eng)
	old := m.blocks[i].Load()
	if old == x {
		return // already the newest holder, this stamp: nothing would change
	}
	if e, _ := m.unpack(old, h, now); e != eng {
		m.blocks[i+1].Store(old)
	}
	m.blocks[i].Store(x)
}
