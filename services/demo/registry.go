package demo

import (
	"fmt"

	"github.com/switchyard-llm/switchyard/fleet"
)

// engineRegistry is the demo's engine registry (docs/security.md#engine-registry):
// the engines it started, at the addresses they listen on, with their
// regions and GPU classes. The processor, the optimizer and every gateway
// get it, so the demo is secure by default: a signal published to its
// Kafka for any other engine, or for one of its engines at another
// endpoint, is dead-lettered and never planned, and no gateway applies a
// snapshot naming one.
func engineRegistry(engines []*engineProc) (*fleet.Registry, error) {
	es := make([]fleet.Engine, 0, len(engines))
	for _, e := range engines {
		es = append(es, fleet.Engine{ID: e.spec.ID, URL: e.url, Region: e.spec.Region, GPUClass: e.spec.GPUClass})
	}
	reg, err := fleet.New(es...)
	if err != nil {
		return nil, fmt.Errorf("engine registry: %w", err)
	}
	return reg, nil
}
