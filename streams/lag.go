package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/obs"
)

// DefaultLagGroups is how many consumer groups GroupLag and MeasureLag
// report by default: the label cardinality of
// switchyard_consumer_lag_records is at most this many groups times the
// topics under the prefix.
const DefaultLagGroups = 20

// LagOpt configures GroupLag and MeasureLag.
type LagOpt interface{ apply(*lagCfg) }

type lagCfg struct {
	prefix    string
	pinned    []string
	maxGroups int
}

type lagOpt func(*lagCfg)

func (o lagOpt) apply(c *lagCfg) { o(c) }

// LagPrefix measures the groups that have committed an offset on a topic
// named PREFIX.*, and only those topics. Default DefaultPrefix.
func LagPrefix(prefix string) LagOpt { return lagOpt(func(c *lagCfg) { c.prefix = prefix }) }

// LagGroups names groups that come first, before the cap (the
// processor's own group): measured whenever they have committed on a
// topic under the prefix, whatever the other groups are. Default none.
func LagGroups(groups ...string) LagOpt {
	return lagOpt(func(c *lagCfg) { c.pinned = append(c.pinned, groups...) })
}

// LagMaxGroups caps the groups measured: the LagGroups, then the others
// in name order; the rest are counted as omitted. Default
// DefaultLagGroups; it must be positive.
func LagMaxGroups(n int) LagOpt { return lagOpt(func(c *lagCfg) { c.maxGroups = n }) }

func newLagCfg(opts []LagOpt) (lagCfg, error) {
	c := lagCfg{prefix: DefaultPrefix, maxGroups: DefaultLagGroups}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.prefix == "" {
		c.prefix = DefaultPrefix
	}
	if c.maxGroups <= 0 {
		return c, fmt.Errorf("lag: at most %d groups: want at least 1", c.maxGroups)
	}
	return c, nil
}

// TopicLag is one group's lag on one topic: the records between each
// partition's end and the group's committed offset, summed.
type TopicLag struct {
	Topic string
	Lag   int64
}

// GroupReport is one group's lag on the topics under the prefix.
type GroupReport struct {
	Group string
	// State is the group's state as the coordinator reports it (Stable,
	// Empty for a group without members, ...).
	State   string
	Members int
	// Topics holds the group's topics under the prefix, by name.
	Topics []TopicLag
	Total  int64
	// Err is why the group's lag is unknown (Topics is then empty).
	Err error
}

// LagReport is MeasureLag's answer.
type LagReport struct {
	// Groups are the measured groups: the LagGroups first, then the
	// others by name.
	Groups []GroupReport
	// Omitted counts the groups with commits under the prefix that the
	// cap left out.
	Omitted int
}

// MeasureLag lists the consumer groups of the cluster, keeps those that
// have committed an offset on a topic under the prefix (every team's
// groups as well as the processor's), and measures their lag on those
// topics with kadm: one ListGroups, one OffsetFetch for all groups, then
// DescribeGroups, OffsetFetch and ListOffsets for the groups kept. An
// error reaching the cluster is returned; a group whose lag cannot be
// measured has its Err set.
func MeasureLag(ctx context.Context, adm *kadm.Client, opts ...LagOpt) (LagReport, error) {
	cfg, err := newLagCfg(opts)
	if err != nil {
		return LagReport{}, err
	}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return LagReport{}, fmt.Errorf("listing consumer groups: %w", err)
	}
	candidates := slices.Clone(cfg.pinned)
	for _, g := range listed.Sorted() {
		// Consumer groups, and groups that only commit (no protocol).
		if (g.ProtocolType == "consumer" || g.ProtocolType == "") && !slices.Contains(candidates, g.Group) {
			candidates = append(candidates, g.Group)
		}
	}
	if len(candidates) == 0 {
		return LagReport{}, nil
	}
	under := func(topic string) bool { return strings.HasPrefix(topic, cfg.prefix+".") }
	fetched := adm.FetchManyOffsets(ctx, candidates...)
	var keep []string
	for _, g := range candidates {
		r, ok := fetched[g]
		if !ok || r.Err != nil {
			continue // no commits (or gone since the listing)
		}
		committed := false
		r.Fetched.Each(func(o kadm.OffsetResponse) { committed = committed || (o.Err == nil && o.At >= 0 && under(o.Topic)) })
		if committed {
			keep = append(keep, g)
		}
	}
	var rep LagReport
	if len(keep) > cfg.maxGroups {
		rep.Omitted = len(keep) - cfg.maxGroups
		keep = keep[:cfg.maxGroups]
	}
	if len(keep) == 0 {
		return rep, nil
	}
	lags, err := adm.Lag(ctx, keep...)
	if err != nil {
		return LagReport{}, fmt.Errorf("measuring consumer lag: %w", err)
	}
	for _, g := range keep {
		dl, ok := lags[g]
		gr := GroupReport{Group: g}
		switch {
		case !ok:
			gr.Err = errors.New("not described")
		case dl.Error() != nil:
			gr.Err = dl.Error()
		default:
			gr.State, gr.Members = dl.State, len(dl.Members)
			for topic, l := range dl.Lag.TotalByTopic() {
				if under(topic) {
					gr.Topics = append(gr.Topics, TopicLag{Topic: topic, Lag: max(l.Lag, 0)})
					gr.Total += max(l.Lag, 0)
				}
			}
			slices.SortFunc(gr.Topics, func(a, b TopicLag) int { return strings.Compare(a.Topic, b.Topic) })
		}
		rep.Groups = append(rep.Groups, gr)
	}
	return rep, nil
}

// GroupLag exports the lag of every consumer group on the topics under
// a prefix (MeasureLag) as switchyard_consumer_lag_records{group,topic},
// at most LagMaxGroups groups (the others counted in
// switchyard_consumer_lag_groups_omitted). A group commits when it
// chooses (the processor: when it checkpoints), so the lag includes what
// it consumed but has not yet committed. Update measures once; Run every
// interval.
type GroupLag struct {
	adm    *kadm.Client
	opts   []LagOpt
	lag    *prometheus.GaugeVec
	groups prometheus.Gauge
	omit   prometheus.Gauge
	errors prometheus.Counter

	mu   sync.Mutex
	last map[[2]string]bool // the series set by the previous Update
}

// NewGroupLag measures through cl and registers its metrics with reg
// (nil: none); an invalid option or a registration error is returned.
func NewGroupLag(cl *kgo.Client, reg prometheus.Registerer, opts ...LagOpt) (*GroupLag, error) {
	if _, err := newLagCfg(opts); err != nil {
		return nil, err
	}
	g := &GroupLag{
		adm:  kadm.NewClient(cl),
		opts: opts,
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "switchyard", Subsystem: "consumer", Name: "lag_records",
			Help: "Records between each partition's end and the group's committed offset, summed per topic, for every consumer group with commits on a Switchyard topic (at most the cap)."}, []string{"group", "topic"}),
		groups: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "switchyard", Subsystem: "consumer", Name: "lag_groups",
			Help: "Consumer groups whose lag the last measurement exported."}),
		omit: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "switchyard", Subsystem: "consumer", Name: "lag_groups_omitted",
			Help: "Consumer groups with commits on Switchyard topics that the cap on groups left out of the last measurement."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "switchyard", Subsystem: "consumer", Name: "lag_errors_total",
			Help: "Lag measurements, of the cluster or of one group, that failed."}),
		last: map[[2]string]bool{},
	}
	if reg != nil {
		var err error
		if g.lag, err = obs.Register(reg, g.lag); err != nil {
			return nil, fmt.Errorf("consumer lag: %w", err)
		}
		if g.groups, err = obs.Register(reg, g.groups); err != nil {
			return nil, fmt.Errorf("consumer lag: %w", err)
		}
		if g.omit, err = obs.Register(reg, g.omit); err != nil {
			return nil, fmt.Errorf("consumer lag: %w", err)
		}
		if g.errors, err = obs.Register(reg, g.errors); err != nil {
			return nil, fmt.Errorf("consumer lag: %w", err)
		}
	}
	return g, nil
}

// Update measures once, sets the metrics (removing the series of groups
// and topics no longer measured) and returns the report. A failed
// measurement of the cluster leaves the metrics as they were.
func (g *GroupLag) Update(ctx context.Context) (LagReport, error) {
	rep, err := MeasureLag(ctx, g.adm, g.opts...)
	if err != nil {
		g.errors.Inc()
		return rep, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := map[[2]string]bool{}
	for _, gr := range rep.Groups {
		if gr.Err != nil {
			g.errors.Inc()
		}
		for _, tl := range gr.Topics {
			g.lag.WithLabelValues(gr.Group, tl.Topic).Set(float64(tl.Lag))
			now[[2]string{gr.Group, tl.Topic}] = true
		}
	}
	for k := range g.last {
		if !now[k] {
			g.lag.DeleteLabelValues(k[0], k[1])
		}
	}
	g.last = now
	g.groups.Set(float64(len(rep.Groups)))
	g.omit.Set(float64(rep.Omitted))
	return rep, nil
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
