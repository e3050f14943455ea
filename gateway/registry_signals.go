package gateway

import (
	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Fields of an engine signal that screenSignal clamps to the registry
// (switchyard_gateway_signals_clamped_total's field label).
const (
	clampMaxBatch = "max_batch"
	clampReplicas = "ready_replicas"
	clampRunning  = "running_requests"
)

// screenSignal bounds one engine signal by the gateway's engine registry
// before the gateway reads health and batch limits from it
// (docs/security.md#engine-registry). Without a registry it keeps s as
// it is. With one, a signal for an engine outside it, or for a
// registered engine at another endpoint, is not to be applied: ok is
// false and reason is the processor's dead-letter code
// (unregistered_engine, endpoint_mismatch). Otherwise s's region and GPU
// class become the registry's, and a max_batch or ready replica count
// above the registry's max_batch or max_replicas is lowered to it, as is
// a running count above max_batch over the (clamped) ready replicas, so
// an inflated signal cannot raise the engine's admission limit
// (admit.BatchFromSignal); clamped lists the fields lowered.
func screenSignal(reg *fleet.Registry, s *schemas.EngineSignal) (clamped []string, reason string, ok bool) {
	if reg == nil {
		return nil, "", true
	}
	if err := reg.Check(s.GetEngineId(), s.GetEndpointUrl()); err != nil {
		return nil, fleet.Reason(err), false
	}
	e, _ := reg.Lookup(s.GetEngineId())
	if e.Region != "" {
		s.Region = e.Region
	}
	if e.GPUClass != "" {
		s.GpuClass = e.GPUClass
	}
	if e.MaxBatch > 0 && s.GetMaxBatch() > e.MaxBatch {
		s.MaxBatch = e.MaxBatch
		clamped = append(clamped, clampMaxBatch)
	}
	if e.MaxReplicas > 0 && s.GetReadyReplicas() > e.MaxReplicas {
		s.ReadyReplicas = e.MaxReplicas
		clamped = append(clamped, clampReplicas)
	}
	if e.MaxBatch > 0 {
		if most := float64(e.MaxBatch) * float64(max(s.GetReadyReplicas(), 1)); s.GetRunningRequests() > most {
			s.RunningRequests = most
			clamped = append(clamped, clampRunning)
		}
	}
	return clamped, "", true
}

// screen applies screenSignal with the gateway's registry, counting what
// it ignores (signals_total by reason) and clamps (signals_clamped_total
// by field); it reports whether s is to be applied.
func (g *Gateway) screen(s *schemas.EngineSignal) bool {
	clamped, reason, ok := screenSignal(g.cfg.registry, s)
	if !ok {
		g.m.signals.WithLabelValues(g.cfg.cluster, reason).Inc()
		g.log.Debug("engine signal outside the registry ignored", "engine", s.GetEngineId(), "reason", reason)
		return false
	}
	for _, f := range clamped {
		g.m.signalsClamped.WithLabelValues(g.cfg.cluster, f).Inc()
	}
	if len(clamped) > 0 {
		g.log.Debug("engine signal clamped to the registry", "engine", s.GetEngineId(), "fields", clamped)
	}
	return true
}
