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
// max-min fair shed fractions, and a feasible flow x per problem edge.
func fairRoute(p *problem) (routed, x []float64, fn *flowNet) {
	nc := len(p.demand)
	fn = newFlowNet(p)
	routed = make([]float64, nc)
	active := make([]bool, nc)
	nActive := 0
	for i := 0; i < nc; i++ {
		if p.demand[i] > 0 && p.start[i+1] > p.start[i] {
			active[i] = true
			nActive++
		}
	}
	setCaps := func(lambda float64) float64 {
		sum := 0.0
		for i := 0; i < nc; i++ {
			c := routed[i]
			if active[i] {
				c = lambda * p.demand[i]
			}
			fn.cap[fn.clusterArc[i]] = c
			sum += c
		}
		return sum
	}
	ran := false // a max flow ran since the capacities were last set
	capTotal := 0.0
	for j := 0; j < len(p.curves); j++ {
		capTotal += fn.cap[fn.engineArc[j]]
	}
	for round := 0; nActive > 0 && round <= nc; round++ {
		// Start from the bound total capacity gives (the routed flow
		// cannot exceed it): with a dense residency graph that is the
		// answer, found with one max flow instead of two.
		lambda := 1.0
		fixed, dem := 0.0, 0.0
		for i := 0; i < nc; i++ {
			if active[i] {
				dem += p.demand[i]
			} else {
				fixed += routed[i]
			}
		}
		if b := (capTotal - fixed) / dem; b < 1 {
			lambda = math.Max(0, b)
		}
		for it := 0; it < 64; it++ {
			want := setCaps(lambda)
			fn.reset()
			got := fn.run()
			ran = true
			if got >= want-fn.eps*float64(nc+1) {
				break
			}
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
				if active[i] {
					dem += p.demand[i]
				} else {
					fixed += routed[i]
				}
			}
			next := 0.0
			if dem > 0 {
				next = math.Max(0, (capN-fixed)/dem)
			}
			if next >= lambda { // numerical stall: shrink a little
				next = lambda * (1 - 1e-12)
			}
			lambda = next
		}
		if lambda >= 1 {
			for i := 0; i < nc; i++ {
				if active[i] {
					routed[i] = p.demand[i]
					active[i] = false
				}
			}
			break
		}
		canGrow := fn.reachSink()
		frozen := 0
		for i := 0; i < nc; i++ {
			if active[i] && !canGrow[i] {
				routed[i] = lambda * p.demand[i]
				active[i] = false
				frozen++
			}
		}
		if frozen == 0 { // numerical corner: freeze everyone left
			for i := 0; i < nc; i++ {
				if active[i] {
					routed[i] = lambda * p.demand[i]
					active[i] = false
				}
			}
		}
		nActive -= frozen
		if frozen == 0 {
			nActive = 0
		}
	}
	// Final flow with the frozen amounts, then read it out exactly. When
	// the last max flow already ran with exactly these capacities, its
	// flow is the one a rerun from zero would compute.
	same := true
	for i := 0; i < nc; i++ {
		if fn.cap[fn.clusterArc[i]] != routed[i] {
			same = false
		}
	}
	setCaps(0)
	if !same || !ran {
		fn.reset()
		fn.run()
	}
	x = make([]float64, len(p.eng))
	load := make([]float64, len(p.curves))
	for e, a := range fn.edgeArc {
		x[e] = math.Max(0, fn.flow[a])
		load[p.eng[e]] += x[e]
	}
	// Top up deficits left by the flow tolerance, then make routed match x.
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
	setCaps(0)
	return routed, x, fn
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
			y[e] *= f
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
