package pick

import (
	"math"
	"sync"
	"sync/atomic"
)

// model is what the gateway has learned of one engine from its own
// requests: time to first token as a linear function of the prefill work
// ahead of the request when it was sent (TTFT = a + p·W, W in tokens), and
// the mean time between output tokens. The statistics are exponentially
// weighted moving averages over requests (weight modelAlpha per request),
// so the model follows an engine whose speed changes (load from other
// gateways, a restart on other hardware) within tens of requests. Reads
// are lock-free; updates take the engine's mutex.
type model struct {
	// Read by every pick: first, next to State's other hot fields, in the
	// order score reads them (known, lastMs, a, p share State's first
	// cache line).
	known   atomic.Bool   // at least modelMinSamples first tokens seen
	knownD  atomic.Bool   // at least one TBOT seen
	lastMs  atomic.Int64  // when the last first token was observed (request start)
	a, p, d atomic.Uint64 // float64 bits: intercept ms, ms per token, TBOT ms
	lastDMs atomic.Int64  // when the last TBOT was observed (request start)
	e2e     atomic.Uint64 // float64 bits: EWMA of engine-side request time, ms

	mu sync.Mutex
	// EWMA sufficient statistics of (W, TTFT).
	n, mW, mT, mWW, mWT float64
	nD, mD              float64 // low envelope of mean TBOT, ms
	nE, mE              float64 // EWMA of engine-side request time, ms
}

// modelSize is model's size in bytes (TestStateLayout checks it).
const modelSize = 8 + 8 + 5*8 + 8 + 9*8

// params is a model as read by a pick.
type params struct {
	a, p, d, e2e  float64
	known, knownD bool
}

// The model keeps the newest modelAlpha-weighted history, needs
// modelMinSamples first tokens before it is used, and is dropped when it
// has seen nothing for modelStaleMs: an engine this gateway stopped
// using may have changed since (other gateways' load, a restart), and a
// stale model that made it look slow would keep it unused for good.
// Meanwhile it scores like the average of the candidates that have a
// current model.
const (
	modelAlpha      = 1.0 / 32
	modelMinSamples = 4
	modelStaleMs    = 30_000
)

// observeFirstToken adds one request's engine-side TTFT (ms) against the
// prefill work (tokens) that was ahead of it, its own included.
func (m *model) observeFirstToken(work, ttftMs float64, atMs int64) {
	if !(work >= 0) || !(ttftMs >= 0) || math.IsInf(work, 0) || math.IsInf(ttftMs, 0) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if atMs-m.lastMs.Load() > modelStaleMs {
		m.n, m.mW, m.mT, m.mWW, m.mWT = 0, 0, 0, 0, 0
		m.known.Store(false)
	}
	if atMs > m.lastMs.Load() {
		m.lastMs.Store(atMs)
	}
	m.n++
	al := max(modelAlpha, 1/m.n) // plain mean until the window fills
	m.mW += al * (work - m.mW)
	m.mT += al * (ttftMs - m.mT)
	m.mWW += al * (work*work - m.mWW)
	m.mWT += al * (work*ttftMs - m.mWT)
	a, p := fitLine(m.mW, m.mT, m.mWW, m.mWT)
	m.a.Store(math.Float64bits(a))
	m.p.Store(math.Float64bits(p))
	if m.n >= modelMinSamples {
		m.known.Store(true)
	}
}

// fitLine is the least-squares line T = a + p·W through the weighted
// moments, constrained to a, p >= 0: when the work barely varies, or the
// slope comes out negative, the time is all intercept unless the mean
// work explains it.
func fitLine(mW, mT, mWW, mWT float64) (a, p float64) {
	v := mWW - mW*mW
	if v > 1e-9*(mWW+1) {
		p = (mWT - mW*mT) / v
		a = mT - p*mW
	}
	if !(p > 0) || !(a >= 0) {
		// Through the origin or flat: split the mean between intercept and
		// slope by nothing we can tell apart; the intercept is the safer
		// reading (it does not scale with queues that may not exist).
		if p > 0 && a < 0 && mW > 0 {
			return 0, mT / mW
		}
		return max(mT, 0), 0
	}
	return a, p
}

// observeTBOT adds one request's mean time between output tokens (ms).
func (m *model) observeTBOT(ms float64, atMs int64) {
	if !(ms >= 0) || math.IsInf(ms, 0) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if atMs-m.lastDMs.Load() > modelStaleMs {
		m.nD, m.mD = 0, 0
	}
	if atMs > m.lastDMs.Load() {
		m.lastDMs.Store(atMs)
	}
	m.nD++
	// Fast down, slow up: d tracks the engine's decode speed near its
	// fastest (its hardware and model), not its current load, which
	// would feed back: a load signal learned from requests that finished
	// seconds ago would swing traffic between engines. Load is the
	// plan's and the queue term's business.
	if m.nD == 1 || ms < m.mD {
		m.mD += (ms - m.mD) / 4
		if m.nD == 1 {
			m.mD = ms
		}
	} else {
		m.mD += (ms - m.mD) / 256
	}
	m.d.Store(math.Float64bits(m.mD))
	m.knownD.Store(true)
}

// observeE2E adds one request's time at the engine, first byte sent to
// last byte received (ms).
func (m *model) observeE2E(ms float64) {
	if !(ms >= 0) || math.IsInf(ms, 0) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nE++
	m.mE += max(modelAlpha, 1/m.nE) * (ms - m.mE)
	m.e2e.Store(math.Float64bits(m.mE))
}

// forget drops what was learned (an engine that restarted may come back
// on other hardware or with other settings).
func (m *model) forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n, m.mW, m.mT, m.mWW, m.mWT, m.nD, m.mD, m.nE, m.mE = 0, 0, 0, 0, 0, 0, 0, 0, 0
	m.e2e.Store(0)
	m.known.Store(false)
	m.knownD.Store(false)
}

// params returns the model as of nowMs: known is false until enough
// samples arrived or once the model is stale.
func (m *model) params(nowMs int64) params {
	var x params
	m.load(nowMs, &x)
	return x
}

// load reads the model into x (see params).
func (m *model) load(nowMs int64, x *params) {
	x.known = m.known.Load() && nowMs-m.lastMs.Load() <= modelStaleMs
	x.a, x.p = 0, 0
	if x.known {
		x.a, x.p = math.Float64frombits(m.a.Load()), math.Float64frombits(m.p.Load())
	}
	x.e2e = math.Float64frombits(m.e2e.Load())
	x.knownD = m.knownD.Load() && nowMs-m.lastDMs.Load() <= modelStaleMs
	x.d = 0
	if x.knownD {
		x.d = math.Float64frombits(m.d.Load())
	}
}
