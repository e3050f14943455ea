// Package shed decides which requests to shed when the snapshot asks a
// cluster to shed a fraction of its traffic: lowest priority class first.
package shed

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
)

// Priority classes, lowest first.
const (
	Low Priority = iota
	Normal
	High
	classes
)

// Priority is a request's class.
type Priority uint8

func (p Priority) String() string {
	switch p {
	case Low:
		return "low"
	case Normal:
		return "normal"
	case High:
		return "high"
	}
	return "unknown"
}

// ParsePriority parses a priority header value: "low", "normal", "high"
// or 0, 1, 2; "" is Normal.
func ParsePriority(s string) (Priority, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "normal", "1":
		return Normal, nil
	case "low", "0":
		return Low, nil
	case "high", "2":
		return High, nil
	}
	if _, err := strconv.Atoi(s); err == nil {
		return 0, fmt.Errorf("priority %q out of range 0..2", s)
	}
	return 0, fmt.Errorf("priority %q is not low, normal or high", s)
}

// Shedder counts requests per class and turns a shed fraction into a
// per-class shed probability: whole classes from the lowest up, then the
// needed part of the next. Decide is lock-free; Update (from a ticker)
// recomputes the probabilities from the recent mix.
type Shedder struct {
	counts [classes]atomic.Int64
	share  [classes]float64       // smoothed mix; Update only
	prob   [classes]atomic.Uint64 // float64 bits
	init   bool
}

// New returns a shedder that assumes all traffic is Normal until Update
// has seen some.
func New() *Shedder {
	s := &Shedder{}
	s.share[Normal] = 1
	return s
}

// Count counts one request of class p.
func (s *Shedder) Count(p Priority) {
	if p < classes {
		s.counts[p].Add(1)
	}
}

// Decide reports whether a request of class p is shed; u is a uniform
// random number in [0,1).
func (s *Shedder) Decide(p Priority, u float64) bool {
	if p >= classes {
		p = Normal
	}
	return u < math.Float64frombits(s.prob[p].Load())
}

// Update folds the counts since the last call into the mix (exponential
// smoothing, weight alpha for the new interval) and recomputes the
// probabilities for shedding the fraction f of traffic. Call it from one
// goroutine.
func (s *Shedder) Update(f, alpha float64) {
	if !(f > 0) {
		f = 0
	}
	if f > 1 {
		f = 1
	}
	if !(alpha > 0) || alpha > 1 {
		alpha = 0.5
	}
	var n [classes]float64
	var total float64
	for c := range n {
		n[c] = float64(s.counts[c].Swap(0))
		total += n[c]
	}
	if total > 0 {
		for c := range n {
			if !s.init {
				s.share[c] = n[c] / total
			} else {
				s.share[c] = (1-alpha)*s.share[c] + alpha*n[c]/total
			}
		}
		s.init = true
	}
	rest := f
	for c := Priority(0); c < classes; c++ {
		p := 0.0
		switch sh := s.share[c]; {
		case rest <= 0:
		case sh <= rest:
			p, rest = 1, rest-sh
		default:
			p, rest = rest/sh, 0
		}
		if c == classes-1 && f >= 1 {
			p = 1
		}
		s.prob[c].Store(math.Float64bits(p))
	}
}

// Probability returns the current shed probability of class p.
func (s *Shedder) Probability(p Priority) float64 {
	if p >= classes {
		return 0
	}
	return math.Float64frombits(s.prob[p].Load())
}
