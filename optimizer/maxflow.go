package optimizer

import "math"

// flowNet is a small Dinic max-flow network with float capacities, used
// to decide how much of each cluster's demand can be routed.
type flowNet struct {
	head            []int32 // first arc of each node, -1 if none
	next, to        []int32
	cap, flow       []float64
	level           []int32
	iter            []int32
	queue           []int32
	eps             float64
	source, sink    int32
	clusterArc      []int32 // arc source->cluster i
	engineArc       []int32 // arc engine j->sink
	edgeArc         []int32 // arc cluster->engine per problem edge
	nClust, nEngine int
	scratch, loads  []float64 // scaleRows
}

func newFlowNet(p *problem) *flowNet {
	nc, ne := len(p.demand), len(p.curves)
	n := nc + ne + 2
	fn := &flowNet{
		head:   make([]int32, n),
		level:  make([]int32, n),
		iter:   make([]int32, n),
		queue:  make([]int32, 0, n),
		source: int32(nc + ne), sink: int32(nc + ne + 1),
		nClust: nc, nEngine: ne,
	}
	for i := range fn.head {
		fn.head[i] = -1
	}
	m := 2 * (nc + ne + len(p.eng))
	fn.next = make([]int32, 0, m)
	fn.to = make([]int32, 0, m)
	fn.cap = make([]float64, 0, m)
	fn.flow = make([]float64, 0, m)
	fn.clusterArc = make([]int32, nc)
	fn.engineArc = make([]int32, ne)
	fn.edgeArc = make([]int32, len(p.eng))
	total := 0.0
	for i := 0; i < nc; i++ {
		fn.clusterArc[i] = fn.add(fn.source, int32(i), 0)
		total += p.demand[i]
	}
	for i := 0; i < nc; i++ {
		for e := p.start[i]; e < p.start[i+1]; e++ {
			fn.edgeArc[e] = fn.add(int32(i), int32(nc)+p.eng[e], math.Inf(1))
		}
	}
	for j := 0; j < ne; j++ {
		c := 0.0
		if p.usable[j] {
			c = p.curves[j].cap
		}
		fn.engineArc[j] = fn.add(int32(nc+j), fn.sink, c)
		total += c
	}
	fn.eps = 1e-12 * (1 + total)
	return fn
}

func (fn *flowNet) add(u, v int32, c float64) int32 {
	a := int32(len(fn.to))
	fn.to = append(fn.to, v, u)
	fn.cap = append(fn.cap, c, 0)
	fn.flow = append(fn.flow, 0, 0)
	fn.next = append(fn.next, fn.head[u], fn.head[v])
	fn.head[u] = a
	fn.head[v] = a + 1
	return a
}

func (fn *flowNet) residual(a int32) float64 { return fn.cap[a] - fn.flow[a] }

func (fn *flowNet) reset() {
	for a := range fn.flow {
		fn.flow[a] = 0
	}
}

func (fn *flowNet) bfs() bool {
	for i := range fn.level {
		fn.level[i] = -1
	}
	fn.queue = fn.queue[:0]
	fn.level[fn.source] = 0
	fn.queue = append(fn.queue, fn.source)
	for q := 0; q < len(fn.queue); q++ {
		u := fn.queue[q]
		for a := fn.head[u]; a >= 0; a = fn.next[a] {
			v := fn.to[a]
			if fn.level[v] < 0 && fn.residual(a) > fn.eps {
				fn.level[v] = fn.level[u] + 1
				fn.queue = append(fn.queue, v)
			}
		}
	}
	return fn.level[fn.sink] >= 0
}

func (fn *flowNet) dfs(u int32, limit float64) float64 {
	if u == fn.sink {
		return limit
	}
	for ; fn.iter[u] >= 0; fn.iter[u] = fn.next[fn.iter[u]] {
		a := fn.iter[u]
		v := fn.to[a]
		r := fn.residual(a)
		if r <= fn.eps || fn.level[v] != fn.level[u]+1 {
			continue
		}
		if d := fn.dfs(v, math.Min(limit, r)); d > 0 {
			fn.flow[a] += d
			fn.flow[a^1] -= d
			return d
		}
	}
	return 0
}

// run computes a max flow (continuing from the current flow) and returns
// its value.
func (fn *flowNet) run() float64 {
	for fn.bfs() {
		copy(fn.iter, fn.head)
		for {
			d := fn.dfs(fn.source, math.Inf(1))
			if d <= fn.eps {
				break
			}
		}
	}
	total := 0.0
	for _, a := range fn.clusterArc {
		total += fn.flow[a]
	}
	return total
}

// reachFromSource marks nodes reachable from the source in the residual
// graph (the source side of a minimum cut).
func (fn *flowNet) reachFromSource() []bool {
	seen := make([]bool, len(fn.head))
	fn.queue = append(fn.queue[:0], fn.source)
	seen[fn.source] = true
	for q := 0; q < len(fn.queue); q++ {
		u := fn.queue[q]
		for a := fn.head[u]; a >= 0; a = fn.next[a] {
			if v := fn.to[a]; !seen[v] && fn.residual(a) > fn.eps {
				seen[v] = true
				fn.queue = append(fn.queue, v)
			}
		}
	}
	return seen
}

// reachSink marks nodes that can reach the sink in the residual graph.
func (fn *flowNet) reachSink() []bool {
	seen := make([]bool, len(fn.head))
	fn.queue = append(fn.queue[:0], fn.sink)
	seen[fn.sink] = true
	for q := 0; q < len(fn.queue); q++ {
		v := fn.queue[q]
		// Arcs u->v with residual: the reverse of arc a (v->u) is a^1.
		for a := fn.head[v]; a >= 0; a = fn.next[a] {
			u := fn.to[a]
			if !seen[u] && fn.residual(a^1) > fn.eps {
				seen[u] = true
				fn.queue = append(fn.queue, u)
			}
		}
	}
	return seen
}

// fairRoute returns the routed rps per cluster: as much as possible, with
// max-min fair shed fractions (progressive filling: raise every active
// cluster's routed fraction together until some can grow no more, freeze
// those, repeat), and a feasible flow x per problem edge.
func fairRoute(p *problem) (routed, x []float64, fn *flowNet) {
	fr := newFairRouter(p)
	for round := 0; fr.nActive > 0 && round <= len(p.demand); round++ {
		lambda := fr.level()
		if lambda >= 1 {
			fr.routeAll()
			break
		}
		fr.freeze(lambda)
	}
	x = fr.finalFlow()
	fr.setCaps(0)
	return fr.routed, x, fr.fn
}

// fairRouter is the state of fairRoute's progressive filling.
type fairRouter struct {
	p        *problem
	fn       *flowNet
	routed   []float64
	active   []bool // still growing
	nActive  int
	capTotal float64 // total engine capacity
	ran      bool    // a max flow ran since the capacities were last set
}

func newFairRouter(p *problem) *fairRouter {
	nc := len(p.demand)
	fr := &fairRouter{p: p, fn: newFlowNet(p), routed: make([]float64, nc), active: make([]bool, nc)}
	for i := 0; i < nc; i++ {
		if p.demand[i] > 0 && p.start[i+1] > p.start[i] {
			fr.active[i] = true
			fr.nActive++
		}
	}
	for j := 0; j < len(p.curves); j++ {
		fr.capTotal += fr.fn.cap[fr.fn.engineArc[j]]
	}
	return fr
}

// setCaps caps each active cluster's source arc at lambda times its
// demand and every other at its routed amount, and returns their sum.
func (fr *fairRouter) setCaps(lambda float64) float64 {
	p, fn := fr.p, fr.fn
	sum := 0.0
	for i := 0; i < len(p.demand); i++ {
		c := fr.routed[i]
		if fr.active[i] {
			c = lambda * p.demand[i]
		}
		fn.cap[fn.clusterArc[i]] = c
		sum += c
	}
	return sum
}

// level returns the largest lambda <= 1 at which every active cluster can
// route lambda times its demand at once (the others keeping their routed
// amounts), leaving the max flow at that lambda in fn.
func (fr *fairRouter) level() float64 {
	p, fn := fr.p, fr.fn
	nc := len(p.demand)
	// Start from the bound total capacity gives (the routed flow
	// cannot exceed it): with a dense residency graph that is the
	// answer, found with one max flow instead of two.
	lambda := 1.0
	fixed, dem := 0.0, 0.0
	for i := 0; i < nc; i++ {
		if fr.active[i] {
			dem += p.demand[i]
		} else {
			fixed += fr.routed[i]
		}
	}
	if b := (fr.capTotal - fixed) / dem; b < 1 {
		lambda = math.Max(0, b)
	}
	for it := 0; it < 64; it++ {
		want := fr.setCaps(lambda)
		fn.reset()
		got := fn.run()
		fr.ran = true
		if got >= want-fn.eps*float64(nc+1) {
			break
		}
		lambda = fr.cutBound(lambda)
	}
	return lambda
}

// cutBound returns the lambda the minimum cut of the last max flow allows
// (the capacity on the source side shared by its active clusters), below
// the lambda that failed.
func (fr *fairRouter) cutBound(lambda float64) float64 {
	p, fn := fr.p, fr.fn
	nc := len(p.demand)
	seen := fn.reachFromSource()
	capN, fixed, dem := 0.0, 0.0, 0.0
	for j := 0; j < len(p.curves); j++ {
		if seen[nc+j] {
			capN += fn.cap[fn.engineArc[j]]
		}
	}
	for i := 0; i < nc; i++ {
		if !seen[i] {
			continue
		}
		if fr.active[i] {
			dem += p.demand[i]
		} else {
			fixed += fr.routed[i]
		}
	}
	next := 0.0
	if dem > 0 {
		next = math.Max(0, (capN-fixed)/dem)
	}
	if next >= lambda { // numerical stall: shrink a little
		next = lambda * (1 - 1e-12)
	}
	return next
}

// routeAll routes every active cluster's whole demand.
func (fr *fairRouter) routeAll() {
	for i := range fr.active {
		if fr.active[i] {
			fr.routed[i] = fr.p.demand[i]
			fr.active[i] = false
		}
	}
}

// freeze fixes at lambda times their demand the active clusters that can
// no longer grow (they cannot reach the sink in the residual graph), or
// every active cluster in the numerical corner where none is found.
func (fr *fairRouter) freeze(lambda float64) {
	p := fr.p
	canGrow := fr.fn.reachSink()
	frozen := 0
	for i := range fr.active {
		if fr.active[i] && !canGrow[i] {
			fr.routed[i] = lambda * p.demand[i]
			fr.active[i] = false
			frozen++
		}
	}
	if frozen == 0 {
		for i := range fr.active {
			if fr.active[i] {
				fr.routed[i] = lambda * p.demand[i]
				fr.active[i] = false
			}
		}
		fr.nActive = 0
		return
	}
	fr.nActive -= frozen
}

// finalFlow runs the max flow with the frozen amounts and reads it out
// exactly, topping up deficits left by the flow tolerance, and makes
// routed match the flow. When the last max flow already ran with exactly
// these capacities, its flow is the one a rerun from zero would compute.
func (fr *fairRouter) finalFlow() []float64 {
	p, fn, routed := fr.p, fr.fn, fr.routed
	nc := len(p.demand)
	same := true
	for i := 0; i < nc; i++ {
		if fn.cap[fn.clusterArc[i]] != routed[i] {
			same = false
		}
	}
	fr.setCaps(0)
	if !same || !fr.ran {
		fn.reset()
		fn.run()
	}
	x := make([]float64, len(p.eng))
	load := make([]float64, len(p.curves))
	for e, a := range fn.edgeArc {
		x[e] = math.Max(0, fn.flow[a])
		load[p.eng[e]] += x[e]
	}
	for i := 0; i < nc; i++ {
		sum := 0.0
		for e := p.start[i]; e < p.start[i+1]; e++ {
			sum += x[e]
		}
		for e := p.start[i]; e < p.start[i+1] && sum < routed[i]; e++ {
			j := p.eng[e]
			d := math.Min(routed[i]-sum, p.curves[j].cap-load[j])
			if d > 0 {
				x[e] += d
				load[j] += d
				sum += d
			}
		}
		routed[i] = sum
	}
	return x
}

// tight reports, after the final max flow of fairRoute, which engines are
// full in every feasible plan (they cannot reach the sink in the residual
// graph) and which clusters use only such engines.
func (fn *flowNet) tight(p *problem) (engines, clusters []bool) {
	reach := fn.reachSink()
	nc := len(p.demand)
	engines = make([]bool, len(p.curves))
	for j := range engines {
		engines[j] = p.usable[j] && !reach[nc+j]
	}
	clusters = make([]bool, nc)
	for i := range clusters {
		clusters[i] = p.start[i+1] > p.start[i] && !reach[i]
	}
	return engines, clusters
}

// repair turns x (close to feasible) into a feasible flow: rows are scaled
// down to at most their routed amount, engines down to capacity, and the
// max flow from that start tops the rows back up exactly.
func (fn *flowNet) repair(p *problem, routed, x []float64) {
	if fn.scaleRows(p, routed, x) {
		return
	}
	nc := len(p.demand)
	load := make([]float64, len(p.curves))
	for i := 0; i < nc; i++ {
		sum := 0.0
		for e := p.start[i]; e < p.start[i+1]; e++ {
			x[e] = math.Max(0, x[e])
			sum += x[e]
		}
		if sum > routed[i] && sum > 0 {
			f := routed[i] / sum
			for e := p.start[i]; e < p.start[i+1]; e++ {
				x[e] *= f
			}
		}
		for e := p.start[i]; e < p.start[i+1]; e++ {
			load[p.eng[e]] += x[e]
		}
	}
	for e := range x {
		j := p.eng[e]
		if c := fn.cap[fn.engineArc[j]]; load[j] > c {
			x[e] *= c / load[j] * (1 - 1e-15)
		}
	}
	fn.reset()
	for i := 0; i < nc; i++ {
		fn.cap[fn.clusterArc[i]] = routed[i]
		sum := 0.0
		for e := p.start[i]; e < p.start[i+1]; e++ {
			a := fn.edgeArc[e]
			fn.flow[a], fn.flow[a^1] = x[e], -x[e]
			sum += x[e]
			fn.flow[fn.engineArc[p.eng[e]]] += x[e]
		}
		a := fn.clusterArc[i]
		fn.flow[a], fn.flow[a^1] = sum, -sum
	}
	for _, a := range fn.engineArc {
		fn.flow[a^1] = -fn.flow[a]
	}
	fn.run()
	for e, a := range fn.edgeArc {
		x[e] = math.Max(0, fn.flow[a])
	}
}

// scaleRows is repair's fast path: when scaling each row of x to exactly
// its routed amount keeps every engine within capacity (the common case:
// Newton's rows are off by rounding-level amounts and most engines have
// room), x is feasible without a max flow. It reports false, leaving x
// as it was, otherwise.
func (fn *flowNet) scaleRows(p *problem, routed, x []float64) bool {
	nc := len(p.demand)
	if cap(fn.scratch) < len(x) {
		fn.scratch = make([]float64, len(x))
	}
	y := fn.scratch[:len(x)]
	load := fn.loadScratch(len(p.curves))
	for i := 0; i < nc; i++ {
		lo, hi := p.start[i], p.start[i+1]
		sum := 0.0
		for e := lo; e < hi; e++ {
			y[e] = math.Max(0, x[e])
			sum += y[e]
		}
		if routed[i] == 0 {
			for e := lo; e < hi; e++ {
				y[e] = 0
			}
			continue
		}
		if !(sum > 0) || math.Abs(sum-routed[i]) > 1e-6*routed[i] {
			return false // not a rounding-level correction
		}
		f := routed[i] / sum
		for e := lo; e < hi; e++ {
			y[e] = float64(y[e] * f)
			load[p.eng[e]] += y[e]
		}
	}
	for j, l := range load {
		if l > fn.cap[fn.engineArc[j]] {
			return false
		}
	}
	copy(x, y)
	return true
}

func (fn *flowNet) loadScratch(n int) []float64 {
	if cap(fn.loads) < n {
		fn.loads = make([]float64, n)
	}
	l := fn.loads[:n]
	clear(l)
	return l
}
