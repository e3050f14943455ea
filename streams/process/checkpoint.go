package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// CheckpointMessage is the message header of checkpoint records: a JSON
// Checkpoint (content-type application/json), not a protobuf message.
const CheckpointMessage = schemas.Package + ".Checkpoint"

// checkpoint waits until every output up to b is acknowledged, then
// writes b's checkpoint and commits its resume offsets to the group.
func (r *runner) checkpoint(ctx context.Context, b batch) error {
	if err := r.acks.wait(ctx, b.epoch); err != nil {
		return err
	}
	if h := r.p.beforeCheckpoint; h != nil {
		if err := h(); err != nil {
			return err
		}
	}
	cp := b.cp
	v, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("encoding checkpoint: %w", err)
	}
	rec := &kgo.Record{Topic: CheckpointTopic(r.p.cfg.TopicPrefix), Key: []byte(r.p.cfg.Group), Value: v,
		Headers: streams.Headers(schemas.ContentTypeJSON, CheckpointMessage)}
	if err := r.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	if err := r.commit(ctx, cp); err != nil {
		// The checkpoint already holds the offsets; a failed group commit
		// only means the next start replays a little more.
		r.p.log.Warn("committing group offsets", "err", err)
	}
	if b.end > r.p.lastEnd.Load() {
		r.p.lastEnd.Store(b.end)
	}
	r.p.ckpts.Add(1)
	if h := r.p.onCheckpoint; h != nil {
		h()
	}
	r.p.m.checkpoints.Inc()
	return nil
}

// commit commits cp's resume offsets to the group.
func (r *runner) commit(ctx context.Context, cp Checkpoint) error {
	offs := map[string]map[int32]kgo.EpochOffset{}
	for _, m := range cp.Partitions {
		if offs[m.Topic] == nil {
			offs[m.Topic] = map[int32]kgo.EpochOffset{}
		}
		offs[m.Topic][m.Partition] = kgo.EpochOffset{Epoch: -1, Offset: m.Resume}
	}
	var commitErr error
	r.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil && commitErr == nil {
					commitErr = e
				}
			}
		}
	})
	return commitErr
}

// readCheckpoint returns the latest checkpoint of group. It reads the
// checkpoint partition with plain Fetch requests through cl (no second
// client to connect and close), from the log start to the end offset
// listed when it starts.
func readCheckpoint(ctx context.Context, cl *kgo.Client, topic, group string) (Checkpoint, bool, error) {
	var cp Checkpoint
	lg, err := checkpointLog(ctx, cl, topic)
	if err != nil || lg.end <= 0 {
		return cp, false, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	found := false
	for off := lg.start; off < lg.end; {
		recs, err := lg.fetch(rctx, cl, off)
		if err != nil {
			return cp, false, err
		}
		if len(recs) == 0 {
			// Nothing readable below the end offset listed at start
			// (e.g. it ends in control records).
			break
		}
		for _, rec := range recs {
			off = rec.Offset + 1
			if string(rec.Key) != group || rec.Offset >= lg.end {
				continue
			}
			var c Checkpoint
			if err := json.Unmarshal(rec.Value, &c); err != nil {
				// Not one of ours (anyone who can produce to the topic
				// can write it): failing here would keep the processor
				// from starting until the record is compacted away, so
				// the latest checkpoint that decodes is used instead.
				continue
			}
			cp, found = c, true
		}
	}
	return cp, found, nil
}

// ckptLog is where the checkpoint partition's log starts and ends (when
// it is listed), and the broker that leads it.
type ckptLog struct {
	topic      string
	id         [16]byte
	leader     int32
	start, end int64
}

// checkpointLog lists the checkpoint partition's log; an empty log (end
// 0) needs no more requests.
func checkpointLog(ctx context.Context, cl *kgo.Client, topic string) (ckptLog, error) {
	lg := ckptLog{topic: topic}
	adm := kadm.NewClient(cl)
	ends, err := listOffsets(ctx, cl, adm.ListEndOffsets, []string{topic})
	if err != nil {
		return lg, fmt.Errorf("listing checkpoint offsets: %w", err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok {
		return lg, fmt.Errorf("listing checkpoint offsets: no offset of %s/0", topic)
	}
	if end.Err != nil {
		return lg, fmt.Errorf("listing checkpoint offsets: %w", end.Err)
	}
	if lg.end = end.Offset; lg.end <= 0 {
		return lg, nil
	}
	starts, err := listOffsets(ctx, cl, adm.ListStartOffsets, []string{topic})
	if err != nil {
		return lg, fmt.Errorf("listing checkpoint offsets: %w", err)
	}
	if so, ok := starts.Lookup(topic, 0); ok && so.Err == nil {
		lg.start = so.Offset
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return lg, fmt.Errorf("checkpoint topic metadata: %w", err)
	}
	pm, ok := md.Topics[topic].Partitions[0]
	if !ok || pm.Leader < 0 {
		return lg, fmt.Errorf("checkpoint topic %s has no leader", topic)
	}
	lg.id, lg.leader = md.Topics[topic].ID, pm.Leader
	return lg, nil
}

// fetch reads the records of the checkpoint partition from off on, with
// one Fetch request to its leader.
func (lg ckptLog) fetch(ctx context.Context, cl *kgo.Client, off int64) ([]*kgo.Record, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 500, 1, 16<<20
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = lg.topic, lg.id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = 0, off, 16<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(lg.leader)))
	if err != nil {
		return nil, fmt.Errorf("reading checkpoints: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("reading checkpoints: %w", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, errors.New("reading checkpoints: unexpected fetch response")
	}
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: off, Topic: lg.topic, Partition: 0},
		&resp.Topics[0].Partitions[0], kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		return nil, fmt.Errorf("reading checkpoints at offset %d: %w", off, fp.Err)
	}
	return fp.Records, nil
}
