package control

import (
	"context"
	"time"

	"github.com/switchyard-llm/switchyard/streams/settings"
)

// recordSettings writes the optimizer's settings record (its planner
// settings, as configured) for replay --verify; a failure is logged.
func (o *Optimizer) recordSettings(ctx context.Context) {
	set := o.cfg.Settings
	rec := settings.Record{Component: settings.Optimizer, StartedUnixMs: time.Now().UnixMilli(), Optimizer: &set}
	if err := settings.Write(ctx, o.cl, o.cfg.TopicPrefix, rec); err != nil {
		o.log.Warn("recording settings", "err", err)
	}
}
