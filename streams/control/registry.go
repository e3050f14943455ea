package control

import (
	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/schemas"
)

// maxVerdictLogs bounds the WARN lines of one window's rejected
// estimates (an attacker chooses how many engine ids it invents); the
// rest are counted and summed up in one line.
const maxVerdictLogs = 10

// screen passes a window's estimates through the guard (engine registry
// and plausibility, fleet.Guard): it counts and logs what the guard
// dropped or quarantined and returns what the planner may see.
func (o *Optimizer) screen(ests []*schemas.Estimate) []*schemas.Estimate {
	if o.guard == nil {
		return ests
	}
	out, verdicts := o.guard.Filter(ests)
	logged, rejected := 0, 0
	for _, v := range verdicts {
		switch v.Kind {
		case fleet.Rejected:
			rejected++
			o.m.rejected.WithLabelValues(v.Reason).Inc()
			if logged < maxVerdictLogs {
				logged++
				o.log.Warn("estimate of an engine outside the registry not planned", "engine", v.Engine, "reason", v.Reason)
			}
		case fleet.Quarantined:
			o.m.quarantined.Inc()
			if v.Entered {
				o.log.Warn("engine's estimate quarantined: its claims move no traffic until gateways confirm them",
					"engine", v.Engine, "reason", v.Reason)
			} else {
				o.log.Debug("engine's estimate still quarantined", "engine", v.Engine, "reason", v.Reason)
			}
		case fleet.Confirmed:
			o.log.Info("engine's estimate plausible again; quarantine lifted", "engine", v.Engine)
		}
	}
	if rejected > logged {
		o.log.Warn("estimates of engines outside the registry not planned", "count", rejected, "logged", logged)
	}
	o.m.inQuarantine.Set(float64(o.guard.Quarantined()))
	return out
}
