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
// Its Lagrangian dual in the cluster prices μ (one per cluster, ms) is
//
//	D(μ) = Σ_i μ_i R_i − Σ_j H_j(max_i (μ_i − r_ij)),  H_j(m) = max_{0≤L≤cap_j} m·L − g_j(L)
//
// where H_j' = L_j(m) is the engine's supply at marginal price m — a
// continuous function even across profile knots, which is why the dual is
// the easier side. Solve
//
//  1. starts from the max-flow plan spread towards capacity-proportional
//     flows, and prices each cluster at its flow-weighted marginal cost;
//  2. maximises the entropy-smoothed dual (max replaced by a log-sum-exp
//     of temperature τ) by damped Newton steps on μ — an nc×nc system per
//     step, factorised with gonum's Cholesky; the Hessian is assembled
//     only at accepted points, and the line search starts from a step
//     radius learnt from earlier backtracking — with τ cut 8× per stage
//     from 8 ms down to max(0.2·Tolerance, 1e-6)·(mean latency). Between
//     stages a predictor follows the path of optima along its tangent
//     (dμ/dτ from the implicit-function theorem, one extra solve with the
//     stage's last Hessian), so each new stage starts close to its
//     optimum. Engines that are full in every feasible plan (the tight
//     sets of the shedding step) supply exactly their capacity. The flows
//     x_ij = L_j·softmax are then optimal for the smoothed problem;
//  3. repairs rounding with the max-flow network (exact row sums, no
//     engine above capacity), so the hard constraints hold exactly;
//  4. certifies the result with a duality gap: the primal objective of the
//     plan against the larger of two Lagrangian lower bounds (D(μ) at the
//     Newton prices, and the bound from engine prices π_j), both exact
//     for any prices. If the relative gap exceeds Tolerance (default
//     1e-4), it continues with block coordinate descent over clusters —
//     each block solved exactly by marginal-cost equalisation, a
//     safeguarded Newton/bisection on μ_i — and, where descent stalls at
//     a capacity wall or a profile knot, negative-cycle cancelling on the
//     residual graph reduced to cluster nodes (Bellman–Ford, exact line
//     search); it stops after 10 sweeps without progress and reports the
//     gap reached.
//
// Churn (per-edge |x − prev| kinks) enters the smoothed dual exactly: an
// edge that carried traffic is two arcs, rtt − churn capped at its previous
// rps and rtt + churn uncapped; each engine then picks its price m by a
// scan of its sorted breakpoints (saturation points of the capped arcs,
// profile knots) and a scalar solve, so that its arc flows
// min(cap, exp((bid − m)/τ)) add up to its supply at m (churn.go). That dual is stiff at small τ and
// flat along the price of a cluster whose arcs all sit at their caps, so
// the churn run starts at τ = 16 ms, keeps each cluster's own Newton step
// within 16 temperatures, stops at a coarser final temperature
// (max(Tolerance, 1e-3)·mean) and certifies the duality gap during that
// last stage, stopping as soon as it is within Tolerance (two 8× colder
// stages when it is not, then a step budget). When that falls short the
// exact phase starts from the best of it, an approximate-churn Newton
// run (previous edges 2·churn cheaper, uncapped) and the previous plan.
//
// Everything iterates in sorted id order (map iteration order never
// reaches the arithmetic), so the same input gives byte-identical output.
// marginal_ms in an explanation is r_ij + π_j.
//
// # Profiles
//
// FitProfile fits the latency profile from observations by non-negative
// least squares over a hinge basis, which is exactly the set of convex
// non-decreasing piecewise-linear functions on a fixed knot grid, shrunk
// towards the GPU class's prior (PriorProfile) where data are thin; see
// FitProfile and docs/solve.md.
package optimizer
