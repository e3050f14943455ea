package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/streams"
)

// ensureTopics creates the input, output and checkpoint topics that are
// missing.
func (p *Processor) ensureTopics(ctx context.Context) error {
	cl := p.cl
	// One metadata request usually finds every topic there; only a
	// missing one costs the creation requests.
	all := append(p.topics.All(), CheckpointTopic(p.cfg.TopicPrefix))
	if details, err := kadm.NewClient(cl).ListTopics(ctx, all...); err == nil {
		exist := 0
		for _, t := range all {
			if d, ok := details[t]; ok && d.Err == nil {
				exist++
			}
		}
		if exist == len(all) {
			return nil
		}
	}
	if err := streams.EnsureTopics(ctx, cl, p.topics, p.cfg.Partitions, p.cfg.Replication); err != nil {
		return err
	}
	compact := "compact"
	if err := streams.CreateTopic(ctx, cl, CheckpointTopic(p.cfg.TopicPrefix), 1, map[string]*string{"cleanup.policy": &compact}, p.cfg.Replication); err != nil {
		return fmt.Errorf("creating checkpoint topic: %w", err)
	}
	return nil
}

// trackPartitions tells core where each input partition's reading starts
// (the checkpoint's resume offset, else the log start) and ends. The
// processor is meant to be the group's only active member: it tracks all
// partitions of its inputs.
func trackPartitions(core *Core, cp Checkpoint, offs inputOffsets) error {
	starts, ends := offs.starts, offs.ends
	resume := map[tp]int64{}
	// Consumption starts at the group's committed offsets (which follow
	// the checkpoint, see checkpoint); without them, at the checkpoint's
	// resume offsets; without either, at the log start.
	offs.committed.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			resume[tp{o.Topic, o.Partition}] = o.At
		}
	})
	for _, m := range cp.Partitions {
		if _, ok := resume[tp{m.Topic, m.Partition}]; !ok {
			resume[tp{m.Topic, m.Partition}] = m.Resume
		}
	}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = fmt.Errorf("listing end offset of %s/%d: %w", o.Topic, o.Partition, o.Err)
			return
		}
		start := int64(0)
		if so, ok := starts.Lookup(o.Topic, o.Partition); ok && so.Err == nil {
			start = so.Offset
		}
		if r, ok := resume[tp{o.Topic, o.Partition}]; ok {
			start = max(start, r)
		}
		core.Track(o.Topic, o.Partition, start, o.Offset)
	})
	return lerr
}

// inputOffsets are the input partitions' start and end offsets and the
// group's committed offsets.
type inputOffsets struct {
	starts, ends kadm.ListedOffsets
	committed    kadm.OffsetResponses
}

// listInputs lists inputOffsets of topics for group, the three requests
// concurrently.
func listInputs(ctx context.Context, cl *kgo.Client, group string, topics ...string) (inputOffsets, error) {
	adm := kadm.NewClient(cl)
	var o inputOffsets
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		if o.starts, err = listOffsets(gctx, cl, adm.ListStartOffsets, topics); err != nil {
			return fmt.Errorf("listing start offsets: %w", err)
		}
		return nil
	})
	g.Go(func() (err error) {
		if o.ends, err = listOffsets(gctx, cl, adm.ListEndOffsets, topics); err != nil {
			return fmt.Errorf("listing end offsets: %w", err)
		}
		return nil
	})
	g.Go(func() (err error) {
		if o.committed, err = adm.FetchOffsets(gctx, group); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return fmt.Errorf("fetching committed offsets: %w", err)
		}
		return nil
	})
	return o, g.Wait()
}

// listOffsets lists offsets with list, retrying for up to 5s while the
// client's metadata does not know a topic yet (just created).
func listOffsets(ctx context.Context, cl *kgo.Client, list func(context.Context, ...string) (kadm.ListedOffsets, error), topics []string) (kadm.ListedOffsets, error) {
	deadline := time.Now().Add(5 * time.Second)
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 500*time.Millisecond) {
		lo, err := list(ctx, topics...)
		if err != nil {
			return lo, err
		}
		unknown := false
		lo.Each(func(o kadm.ListedOffset) {
			unknown = unknown || errors.Is(o.Err, kerr.UnknownTopicOrPartition)
		})
		if !unknown || time.Now().After(deadline) {
			return lo, nil
		}
		cl.ForceMetadataRefresh()
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return lo, ctx.Err()
		case <-t.C:
		}
	}
}
