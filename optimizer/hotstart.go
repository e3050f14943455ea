package optimizer

import "math"

// probeSteps is how many Newton steps the first temperature stage gets
// before stalledAt decides whether hotStart restarts it hotter.
const probeSteps = 8

// stalledAt reports whether the first stage stalls: after probeSteps
// steps its gradient (the supply mismatch, 1-norm) g1 is still above
// half its first value g1First and 1.2 times the routed demand (1.4
// times with churn arcs). Measured at the 8th step
// (docs/notes/2026-12-scale.md): fleets that converge from the default
// temperature end below 1.05 times the demand (8x64 full matrices), and
// with churn below 1.28 times (the golden 5x12 churn fleet); the
// stalling ones 1.37 to 1.73 times the demand, with churn 1.49 to 2.12.
func (nt *newtonState) stalledAt(g1, g1First float64) bool {
	if nt.ar != nil {
		return g1 > 0.5*g1First && g1 > 1.4*nt.total
	}
	return g1 > 0.5*g1First && g1 > 1.2*nt.total
}

// hotStartFactor is how much hotter hotStart restarts.
const hotStartFactor = 64

// hotStart restarts the Newton run from the prices start at a temperature
// hotStartFactor times tau, after the first stage at tau failed to halve
// the gradient in probeSteps steps, and returns that temperature.
//
// At the starting temperature (8 ms, tuned on full latency matrices) the
// softmax of an engine is nearly one-hot when its clusters' bids differ by
// tens of ms, as they do when each cluster may use only the engines of a
// few nearby regions (synth.SparseInstance) or a random fraction of the
// fleet: a cluster that wins no engine then has an almost zero row in
// the Hessian, the Newton direction is huge along it and the line search
// cuts every step to a sliver (100x20,000 sparse: 120 steps, gap 2.6
// after Newton, 0.57% after 36 sweeps of the exact phase). At 512 ms every
// cluster shares its engines, and the same instance takes 45 steps to
// a gap of 1.4e-4. Instances whose first stage converges never restart,
// so their plans are unchanged.
func (nt *newtonState) hotStart(start []float64, tau, tauFinal float64) float64 {
	if nt.s.debug != nil {
		nt.s.debug("hot start: tau %g stalled after %d steps, restarting at %g", tau, nt.steps, hotStartFactor*tau)
	}
	copy(nt.mu, start)
	nt.damp = 1e-10
	nt.stalled = false
	return math.Max(tauFinal, hotStartFactor*tau)
}
