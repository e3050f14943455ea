package process

import (
	"context"
	"time"

	"github.com/switchyard-llm/switchyard/streams/settings"
)

// Settings is the settings record the processor writes when it starts.
func (c Config) Settings(started time.Time) settings.Record {
	c.defaults()
	return settings.Record{
		Component: settings.Processor, Instance: c.Group, StartedUnixMs: started.UnixMilli(),
		Processor: &settings.ProcessorSettings{
			WindowMs: c.Window.Milliseconds(), SlideMs: c.Slide.Milliseconds(), AllowedLatenessMs: c.AllowedLateness.Milliseconds(),
			RoutingWindowTime: RoutingWindowTime,
		},
	}
}

// recordSettings writes the settings record; a failure is logged (the
// processor runs on, but a replay cannot find its settings).
func (p *Processor) recordSettings(ctx context.Context) {
	if err := settings.Write(ctx, p.cl, p.cfg.TopicPrefix, p.cfg.Settings(time.Now())); err != nil {
		p.log.Warn("recording settings", "err", err)
	}
}
