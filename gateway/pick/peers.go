package pick

// States appends the state of every engine the pool has to dst, in the
// order the pool created them, and returns it. States are never removed,
// so a state keeps its position in the result: gateway/peers indexes
// engines by it.
func (p *Pool) States(dst []*State) []*State {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(dst)
	dst = append(dst, make([]*State, len(p.states))...)
	for _, s := range p.states {
		dst[n+int(s.idx)] = s
	}
	return dst
}
