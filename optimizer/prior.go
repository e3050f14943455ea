package optimizer

// GPU classes with a built-in prior latency profile. The engine
// simulator models the same classes.
const (
	GPUH100 = "h100"
	GPUA100 = "a100"
	GPUL4   = "l4"
)

// GPUClasses lists the classes PriorProfile knows, sorted.
func GPUClasses() []string { return []string{GPUA100, GPUH100, GPUL4} }

// PriorProfile returns the prior latency profile (engine time to first
// token in ms against utilization) of a GPU class, and false for an
// unknown class. The curves are convex and non-decreasing; they describe a
// typical 8B-parameter chat model on one replica of the class with a
// 512-token prompt, and rise steeply as the batch saturates.
func PriorProfile(gpuClass string) (Profile, bool) {
	var pts [][2]float64
	switch gpuClass {
	case GPUH100:
		pts = [][2]float64{{0, 120}, {0.5, 180}, {0.7, 260}, {0.8, 360}, {0.9, 650}, {0.95, 1100}, {1, 2000}}
	case GPUA100:
		pts = [][2]float64{{0, 200}, {0.5, 300}, {0.7, 440}, {0.8, 620}, {0.9, 1150}, {0.95, 2000}, {1, 3600}}
	case GPUL4:
		pts = [][2]float64{{0, 450}, {0.5, 700}, {0.7, 1050}, {0.8, 1500}, {0.9, 2700}, {0.95, 4600}, {1, 8200}}
	default:
		return Profile{}, false
	}
	p := Profile{Prior: true}
	for _, q := range pts {
		p.Points = append(p.Points, ProfilePoint{Utilization: q[0], LatencyMs: q[1]})
	}
	return p, true
}
