package optimizer

import "math"

// probeSteps is how many Newton steps the first temperature stage gets to
// halve the gradient before hotStart restarts it hotter, when the
// gradient (the supply mismatch, 1-norm) is then still above 1.2 times
// the routed demand. (The 8x64 benchmark fleets, which converge from
// 8 ms, end their 8th step below 1.05 times; the stalling ones measured
// 1.37 to 1.73 times.)
const probeSteps = 8

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
