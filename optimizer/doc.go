// Package optimizer computes Switchyard's global routing weights.
//
// It is pure: no I/O, no clocks, no goroutines. The same Instance always
// gives a byte-identical Solution.
//
// # Problem
//
// For clusters i with demand D_i (rps) and engines j with capacity C_j (rps),
// latency profile f_j (ms as a convex non-decreasing piecewise-linear
// function of utilization) and network latency r_ij (ms), choose flows
// x_ij >= 0 (rps) minimising
//
//	sum_ij x_ij r_ij + sum_j L_j f_j(L_j/C_j) + churn_weight * sum_ij |x_ij - D_i p_ij|
//
// where L_j = sum_i x_ij and p_ij are the previous weights, subject to
// sum_j x_ij = R_i (the routed part of D_i), L_j <= max_utilization*C_j,
// x_ij = 0 for unhealthy engines and for engines missing from the
// cluster's rtt_ms map (data residency). The first two terms are the total
// end-to-end latency rate (ms*rps); dividing by sum R_i gives the mean
// end-to-end latency reported as objective_ms. The churn term charges
// churn_weight ms for every rps moved away from (or onto) an engine
// relative to the previous weights.
//
// The engine term g_j(L) = L f_j(L/C_j) is convex because f_j is convex,
// non-decreasing and non-negative; its derivative g'_j(L) = f_j(u) + u f'_j(u)
// is the marginal latency of one more request on engine j.
//
// # Shedding
//
// Routed amounts R_i are fixed first, lexicographically: shed as little as
// possible, and among those plans the shed fractions are max-min fair (the
// largest shed fraction is as small as possible, then the next, ...). This is
// computed exactly by progressive filling with max-flow (Dinic) on the
// cluster→engine residency graph with engine capacities max_utilization*C_j:
// each round finds the largest common routed fraction λ of the unfrozen
// clusters by Dinkelbach iterations on min cuts, then freezes the clusters
// that cannot reach the sink in the residual graph (they form a tight set).
// When total capacity suffices nothing is shed.
//
// # Solver
//
// With R fixed the problem is a convex separable transportation problem.
// The solver starts from the max-flow plan (feasible) and runs block
// coordinate descent over clusters: each block is solved exactly by
// marginal-cost equalisation — a safeguarded regula falsi on the cluster's
// price μ_i so that every engine with flow has r_ij + g'_j(L_j) (+/- the
// churn subgradient) equal to μ_i — which keeps every iterate feasible.
// Coordinate descent can stall where a capacity or a profile knot binds, so
// when a sweep no longer improves, the solver looks for a negative cycle in
// the residual graph reduced to cluster nodes (one cluster takes an
// engine's capacity from another) by Bellman–Ford and pushes flow around it
// with an exact line search.
//
// The stopping rule is a certified duality gap: engine prices π_j are taken
// in the subdifferential of g_j at the current load (raised on saturated
// engines to the clusters' prices), cluster prices μ_i are then optimised
// exactly, and the Lagrangian dual value D(π, μ) is a lower bound on the
// optimum. The solver stops when (primal − D)/primal <= Tolerance (default
// 1e-4) and reports that gap; marginal_ms in the explanations is r_ij + π_j.
//
// # Profiles
//
// FitProfile fits the latency profile from observations by non-negative
// least squares over a hinge basis, which is exactly the set of convex
// non-decreasing piecewise-linear functions on a fixed knot grid; see
// fit.go.
package optimizer
