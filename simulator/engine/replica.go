package engine

import "time"

type seqState uint8

const (
	stateWaiting seqState = iota + 1
	statePrefilling
	stateDecoding
	stateCanceled // canceled while waiting; still in the queue
)

// seq is one request inside a replica.
type seq struct {
	id       uint64
	rep      *replica
	state    seqState
	arrival  time.Duration
	admitted time.Duration
	firstTok time.Duration
	prompt   int
	output   int
	adapter  int // LoRA adapter, 0: the base model
	cached   int
	// remaining prefill tokens, and this step's chunk of them.
	remaining, chunk int
	hashes           []uint64
	held             []*block // cache blocks referenced
	private          int      // blocks held outside the cache
	// startStep is the replica step that produced the first token;
	// finishStep the one that produces the last.
	startStep, finishStep int64
	heapIdx               int
}

// generated is the number of output tokens after replica step step.
func (s *seq) generated(step int64) int { return 1 + int(step-s.startStep) }

// replica is one engine instance: a queue, a batch and a KV cache.
type replica struct {
	idx        int
	cache      *blockCache
	lora       loraSlots // adapters on the GPU (lora.go)
	queue      []*seq    // FIFO from qHead; may hold canceled entries
	qHead      int
	nWaiting   int // queue entries not canceled
	prefilling []*seq
	decoding   seqHeap
	ctxSum     int64 // context tokens of decoding sequences
	step       int64 // completed steps
	busy       bool
	stepStart  time.Duration
	stepEnd    time.Duration
}

func (r *replica) running() int { return len(r.prefilling) + len(r.decoding) }
func (r *replica) load() int    { return r.running() + r.nWaiting }

func (r *replica) enqueue(s *seq) {
	r.queue = append(r.queue, s)
	r.nWaiting++
}

// head returns the first waiting request, recycling canceled ones.
func (r *replica) head(e *Engine) *seq {
	for r.qHead < len(r.queue) {
		s := r.queue[r.qHead]
		if s.state != stateCanceled {
			return s
		}
		r.pop()
		e.recycle(s)
	}
	return nil
}

func (r *replica) pop() {
	r.queue[r.qHead] = nil
	r.qHead++
	if r.qHead == len(r.queue) {
		r.queue, r.qHead = r.queue[:0], 0
	} else if r.qHead >= 64 && r.qHead*2 >= len(r.queue) {
		n := copy(r.queue, r.queue[r.qHead:])
		clear(r.queue[n:])
		r.queue, r.qHead = r.queue[:n], 0
	}
}

// schedule starts a step on idle replica r at time t if it has work.
func (e *Engine) schedule(r *replica, t time.Duration) {
	p := &e.cfg.Preset
	decodes := len(r.decoding)
	budget := p.MaxBatchedTokens - decodes
	seqs, prefill := decodes, 0
	for _, s := range r.prefilling {
		c := min(s.remaining, budget)
		s.chunk = c
		budget -= c
		prefill += c
		if c > 0 {
			seqs++
		}
	}
	loads := 0
	for budget > 0 && r.running() < p.MaxSeqs {
		s := r.next(e) // lora.go
		if s == nil || !e.admit(r, s) {
			break
		}
		r.take(s)
		r.nWaiting--
		if s.adapter != 0 {
			e.st.LoRARequests++
		}
		if r.lora.acquire(s.adapter, e.cfg.MaxLoRAs, r.step) {
			loads++
			e.st.LoRALoads++
		}
		s.admitted = t
		c := min(s.remaining, budget)
		s.chunk = c
		budget -= c
		prefill += c
		seqs++
		r.prefilling = append(r.prefilling, s)
	}
	if seqs == 0 {
		r.busy = false
		return
	}
	d := p.StepBase +
		p.StepPerSeq*time.Duration(seqs) +
		p.StepPerContextToken*time.Duration(r.ctxSum) +
		time.Duration(float64(prefill)*e.prefill) +
		e.cfg.LoRALoad*time.Duration(loads)
	if m := e.cfg.LatencyMultiplier; m != 1 {
		d = time.Duration(float64(d) * m)
	}
	r.busy, r.stepStart, r.stepEnd = true, t, t+d
}

// admit reserves the KV blocks of waiting request s, reusing its cached
// prefix; false when they do not fit now.
func (e *Engine) admit(r *replica, s *seq) bool {
	bs := e.cfg.Preset.BlockSize
	held, revive := r.cache.lookup(s.hashes, (s.prompt-1)/bs, s.held[:0])
	s.held = held
	hits := len(held)
	fresh := blocksFor(s.prompt+s.output, bs) - hits
	if !r.cache.fits(fresh, revive) {
		clear(held)
		s.held = held[:0]
		return false
	}
	r.cache.acquire(held, fresh)
	s.private = fresh
	s.cached = hits * bs
	s.remaining = s.prompt - s.cached
	s.state = statePrefilling
	e.st.PrefixQueryTokens += int64(s.prompt)
	e.st.PrefixHitTokens += int64(s.cached)
	return true
}

// endStep completes r's running step at r.stepEnd and starts the next.
func (e *Engine) endStep(r *replica) {
	t := r.stepEnd
	r.step++
	e.st.Steps++
	e.st.BusyTime += t - r.stepStart
	n := len(r.decoding)
	e.st.GenerationTokens += int64(n)
	r.ctxSum += int64(n)
	if e.cfg.TokenEvents {
		for _, s := range r.decoding {
			if s.finishStep != r.step {
				e.emit(Event{Kind: EventToken, ID: s.id, Time: t, Tokens: s.generated(r.step)})
			}
		}
	}
	for len(r.decoding) > 0 && r.decoding[0].finishStep == r.step {
		s := r.decoding.popMin()
		r.ctxSum -= int64(s.prompt + s.output)
		e.finish(r, s, t)
	}
	kept := r.prefilling[:0]
	for _, s := range r.prefilling {
		s.remaining -= s.chunk
		s.chunk = 0
		if s.remaining > 0 {
			kept = append(kept, s)
			continue
		}
		e.firstToken(r, s, t)
	}
	clear(r.prefilling[len(kept):])
	r.prefilling = kept
	r.busy = false
	e.schedule(r, t)
}

func (e *Engine) firstToken(r *replica, s *seq, t time.Duration) {
	s.firstTok = t
	s.startStep = r.step
	s.finishStep = r.step + int64(s.output) - 1
	e.st.PromptTokens += int64(s.prompt)
	e.st.GenerationTokens++
	// Publish the prompt's newly computed full blocks.
	for j := s.cached / e.cfg.Preset.BlockSize; j < len(s.hashes); j++ {
		var parent uint64
		if j > 0 {
			parent = s.hashes[j-1]
		}
		if b := r.cache.register(s.hashes[j], parent, j > 0); b != nil {
			s.held = append(s.held, b)
			s.private--
		}
	}
	e.emit(Event{Kind: EventFirstToken, ID: s.id, Time: t, Tokens: 1})
	if s.output == 1 {
		e.finish(r, s, t)
		return
	}
	s.state = stateDecoding
	r.ctxSum += int64(s.prompt + 1)
	r.decoding.push(s)
}

func (e *Engine) finish(r *replica, s *seq, t time.Duration) {
	r.cache.release(s.held, s.private)
	r.lora.release(s.adapter)
	delete(e.byID, s.id)
	e.st.Finished++
	e.emit(Event{Kind: EventFinished, ID: s.id, Time: t, Tokens: s.output, Result: Result{
		ID: s.id, Replica: r.idx,
		Arrival: s.arrival, Admitted: s.admitted, FirstToken: s.firstTok, Finish: t,
		PromptTokens: s.prompt, CachedTokens: s.cached, OutputTokens: s.output,
	}})
	e.recycle(s)
}

// seqHeap is a min-heap of decoding sequences by finishStep, ties by id
// so that finishing order is deterministic.
type seqHeap []*seq

func (h seqHeap) less(i, j int) bool {
	a, b := h[i], h[j]
	return a.finishStep < b.finishStep || (a.finishStep == b.finishStep && a.id < b.id)
}

func (h seqHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h *seqHeap) push(s *seq) {
	s.heapIdx = len(*h)
	*h = append(*h, s)
	h.up(s.heapIdx)
}

func (h *seqHeap) popMin() *seq {
	s := (*h)[0]
	h.removeAt(0)
	return s
}

func (h *seqHeap) remove(s *seq) { h.removeAt(s.heapIdx) }

func (h *seqHeap) removeAt(i int) {
	old := *h
	n := len(old) - 1
	if i != n {
		old.swap(i, n)
	}
	old[n] = nil
	*h = old[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h seqHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts i down and reports whether it moved.
func (h seqHeap) down(i int) bool {
	start := i
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}
