package engine

import (
	"slices"
	"time"
)

// DefaultLoRALoad is the time a replica's step takes longer for each
// LoRA adapter it loads onto the GPU (Config.LoRALoad's default): a
// rank-16 adapter of an 8B model is tens of MB copied from host memory.
const DefaultLoRALoad = 25 * time.Millisecond

// maxAdapter bounds Request.Adapter and Config.MaxLoRAs.
const maxAdapter = 1 << 16

// maxLoRAScan bounds how many waiting requests a replica looks past a
// head whose adapter cannot be loaded (every adapter slot in use), as
// vLLM's scheduler skips such requests and takes later ones.
const maxLoRAScan = 64

// loraSlots are the adapters loaded on one replica's GPU: at most
// Config.MaxLoRAs, each with the running requests that use it; one
// without users is evicted (least recently used first) to load another.
type loraSlots struct {
	ids   []int
	users []int
	used  []int64 // replica step of the last admission
}

// find returns the slot of adapter a, or -1.
func (l *loraSlots) find(a int) int {
	for i, id := range l.ids {
		if id == a {
			return i
		}
	}
	return -1
}

// fits reports whether a request of adapter a (0: the base model) can run
// with max slots: a is loaded, a slot is free, or one has no users.
func (l *loraSlots) fits(a, max int) bool {
	if a == 0 || len(l.ids) < max || l.find(a) >= 0 {
		return true
	}
	for _, u := range l.users {
		if u == 0 {
			return true
		}
	}
	return false
}

// acquire counts a request of adapter a running at step, loading a into
// a free or the least recently used idle slot; it reports whether a load
// was needed. The caller checked fits.
func (l *loraSlots) acquire(a, max int, step int64) (loaded bool) {
	if a == 0 {
		return false
	}
	if i := l.find(a); i >= 0 {
		l.users[i]++
		l.used[i] = step
		return false
	}
	if len(l.ids) < max {
		l.ids, l.users, l.used = append(l.ids, a), append(l.users, 1), append(l.used, step)
		return true
	}
	lru := -1
	for i, u := range l.users {
		if u == 0 && (lru < 0 || l.used[i] < l.used[lru]) {
			lru = i
		}
	}
	l.ids[lru], l.users[lru], l.used[lru] = a, 1, step
	return true
}

// release ends a running request of adapter a.
func (l *loraSlots) release(a int) {
	if a == 0 {
		return
	}
	if i := l.find(a); i >= 0 && l.users[i] > 0 {
		l.users[i]--
	}
}

// active returns the adapters with running requests.
func (l *loraSlots) active(dst []int) []int {
	for i, id := range l.ids {
		if l.users[i] > 0 {
			dst = append(dst, id)
		}
	}
	return dst
}

// next returns the first waiting request of r that may start now as far
// as adapters go (the head, or the first of the next maxLoRAScan whose
// adapter fits), removed from the queue, or nil.
func (r *replica) next(e *Engine) *seq {
	s := r.head(e)
	if s == nil || r.lora.fits(s.adapter, e.cfg.MaxLoRAs) {
		return s
	}
	for i, n := r.qHead+1, 0; i < len(r.queue) && n < maxLoRAScan; i++ {
		c := r.queue[i]
		if c.state == stateCanceled {
			continue
		}
		n++
		if r.lora.fits(c.adapter, e.cfg.MaxLoRAs) {
			return c
		}
	}
	return nil
}

// take removes s, a waiting request next returned, from r's queue.
func (r *replica) take(s *seq) {
	if r.queue[r.qHead] == s {
		r.pop()
		return
	}
	for i := r.qHead + 1; i < len(r.queue); i++ {
		if r.queue[i] == s {
			copy(r.queue[i:], r.queue[i+1:])
			r.queue[len(r.queue)-1] = nil
			r.queue = r.queue[:len(r.queue)-1]
			return
		}
	}
}

// Adapters returns the adapters with requests running on some replica
// (loaded and in use) and those of waiting requests, each sorted and
// without repeats.
func (e *Engine) Adapters() (running, waiting []int) {
	for _, r := range e.replicas {
		running = r.lora.active(running)
		for i := r.qHead; i < len(r.queue); i++ {
			if s := r.queue[i]; s.state == stateWaiting && s.adapter != 0 {
				waiting = append(waiting, s.adapter)
			}
		}
	}
	slices.Sort(running)
	slices.Sort(waiting)
	return slices.Compact(running), slices.Compact(waiting)
}
