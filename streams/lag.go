package streams

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/obs"
)

// GroupLag exports the lag of consumer groups (the records between each
// partition's end and the group's committed offset, summed per topic) as
// switchyard_consumer_lag_records{group,topic}. A group commits when it
// checkpoints, so the lag includes what it consumed but has not yet
// committed. Update measures once; Run every interval.
type GroupLag struct {
	adm    *kadm.Client
	groups []string
	lag    *prometheus.GaugeVec
	errors prometheus.Counter
}

// NewGroupLag measures groups through cl and registers its metrics with
// reg (nil: none); a registration error is returned.
func NewGroupLag(cl *kgo.Client, reg prometheus.Registerer, groups ...string) (*GroupLag, error) {
	g := &GroupLag{
		adm:    kadm.NewClient(cl),
		groups: groups,
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "switchyard", Subsystem: "consumer", Name: "lag_records",
			Help: "Records between each partition's end and the group's committed offset, summed per topic."}, []string{"group", "topic"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "switchyard", Subsystem: "consumer", Name: "lag_errors_total",
			Help: "Lag measurements that failed."}),
	}
	if reg != nil {
		var err error
		if g.lag, err = obs.Register(reg, g.lag); err != nil {
			return nil, fmt.Errorf("consumer lag: %w", err)
		}
		if g.errors, err = obs.Register(reg, g.errors); err != nil {
			return nil, fmt.Errorf("consumer lag: %w", err)
		}
	}
	return g, nil
}

// Update measures the groups' lag once and returns it by group and
// topic. A partition whose commit or end offset is unknown counts as 0.
func (g *GroupLag) Update(ctx context.Context) (map[string]map[string]int64, error) {
	lags, err := g.adm.Lag(ctx, g.groups...)
	if err != nil {
		g.errors.Inc()
		return nil, fmt.Errorf("measuring consumer lag of %v: %w", g.groups, err)
	}
	out := map[string]map[string]int64{}
	for _, dl := range lags.Sorted() {
		if err := dl.Error(); err != nil {
			g.errors.Inc()
			return nil, fmt.Errorf("measuring consumer lag of %s: %w", dl.Group, err)
		}
		byTopic := map[string]int64{}
		for _, l := range dl.Lag.Sorted() {
			byTopic[l.Topic] += max(l.Lag, 0)
		}
		for topic, n := range byTopic {
			g.lag.WithLabelValues(dl.Group, topic).Set(float64(n))
		}
		out[dl.Group] = byTopic
	}
	return out, nil
}

// Run calls Update every interval (default 15 s) until ctx is done, and
// returns nil; failed measurements are counted, not returned.
func (g *GroupLag) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = 15 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		_, _ = g.Update(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
