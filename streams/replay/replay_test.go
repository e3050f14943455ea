package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/replay/replaytest"
)

var t0 = time.Now().Add(-time.Hour).Truncate(time.Minute)

// liveEstimates runs the live processor over the history and returns its
// published estimates by "key@window_end".
func liveEstimates(t *testing.T, kc *kfake.Cluster, prefix string, lastEnd time.Time) map[string][]byte {
	t.Helper()
	cfg := process.Config{TopicPrefix: prefix, Window: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second}
	p, err := process.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pcl := testenv.Client(t, kc, p.ClientOpts()...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, pcl) }()
	testenv.Eventually(t, 20*time.Second, func() bool { return !p.Stats().LastWindowEnd.Before(lastEnd) }, "live processor done")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rd := testenv.Client(t, kc, kgo.ConsumeTopics(streams.TopicsFor(prefix).Estimates), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	out := map[string][]byte{}
	want := int(p.Stats().EstimatesPublished)
	testenv.Eventually(t, 10*time.Second, func() bool {
		pctx, pcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer pcancel()
		rd.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			e, err := estimate.DecodeEstimate(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%s@%d", r.Key, e.WindowEndUnixMs())] = r.Value
		})
		return len(out) >= want
	}, "live estimates read back")
	return out
}

func TestReplay(t *testing.T) {
	kc := testenv.Kafka(t)
	const prefix = "rp"
	replaytest.History(t, kc, streams.TopicsFor(prefix), t0, 60*time.Second)
	live := liveEstimates(t, kc, prefix, t0.Add(55*time.Second))
	from, to := t0.Add(20*time.Second), t0.Add(50*time.Second)
	base := Config{TopicPrefix: prefix, From: from, To: to,
		Window: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second}
	base.Settings.Clusters = []string{"us", "eu"}
	base.Settings.EstimateTTL = time.Hour // the history is an hour old

	t.Run("estimates_equal_live", func(t *testing.T) {
		cfg := base
		var mu sync.Mutex
		compared := 0
		cfg.OnWindow = func(f process.Fired) {
			mu.Lock()
			defer mu.Unlock()
			if end := time.UnixMilli(f.End); !end.After(from) || end.After(to) {
				return
			}
			for _, e := range f.Estimates {
				b, err := estimate.Marshal(e)
				if err != nil {
					t.Fatal(err)
				}
				id := fmt.Sprintf("%s@%d", estimate.Key(e), f.End)
				if !bytes.Equal(live[id], b) {
					t.Errorf("%s: replayed estimate differs from the live one", id)
				}
				compared++
			}
		}
		if _, err := Run(context.Background(), testenv.Client(t, kc), cfg, &bytes.Buffer{}, Binary); err != nil {
			t.Fatal(err)
		}
		// 6 windows end in (from, to]: 2 engines + 2 demand + 2 network each.
		if compared != 36 {
			t.Errorf("compared %d estimates, want 36", compared)
		}
	})

	t.Run("deterministic_snapshots", func(t *testing.T) {
		// One client for both runs: the first run leaves it consuming
		// nothing, so the second reads the range again from its start.
		cl := testenv.Client(t, kc)
		var outs [2]bytes.Buffer
		for i := range outs {
			res, err := Run(context.Background(), cl, base, &outs[i], Binary)
			if err != nil {
				t.Fatal(err)
			}
			if res.Snapshots != 6 || res.DeadLettered != 0 || res.Late != 0 {
				t.Errorf("result %+v", res)
			}
		}
		if !bytes.Equal(outs[0].Bytes(), outs[1].Bytes()) {
			t.Error("two replays of the same range differ")
		}
		snaps, err := ReadSnapshots(bytes.NewReader(outs[0].Bytes()), Binary)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range snaps {
			end := from.Add(time.Duration(i+1) * 5 * time.Second).UnixMilli()
			if s.GetVersion() != uint64(end) || s.GetCreatedUnixMs() != end {
				t.Errorf("snapshot %d: version %d created %d", i, s.GetVersion(), s.GetCreatedUnixMs())
			}
			if len(s.GetClusters()) != 2 {
				t.Errorf("snapshot %d has %d clusters", i, len(s.GetClusters()))
			}
		}
	})
}

func TestRunChecksInput(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("chk")
	rng := Config{TopicPrefix: "chk", From: t0, To: t0.Add(time.Minute)}
	for _, tc := range []struct {
		name string
		cl   *kgo.Client
		cfg  Config
		want string
	}{
		{"no_client", nil, rng, "no kafka client"},
		{"group", testenv.Client(t, kc, kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topics.Signals)), rng, `group "g"`},
		{"topics", testenv.Client(t, kc, kgo.ConsumeTopics(topics.Signals)), rng, "already consumes"},
		{"empty_range", testenv.Client(t, kc), Config{TopicPrefix: "chk", From: t0, To: t0}, "empty range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cl, tc.cfg, &bytes.Buffer{}, JSONLines)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: err %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			var cfg Config
			err := LoadConfig(f, &cfg)
			good := strings.HasSuffix(f, ".good.yaml")
			if good && err != nil {
				t.Errorf("good config rejected: %v", err)
			}
			if !good && !errors.Is(err, ErrConfig) {
				t.Errorf("bad config: err %v, want ErrConfig", err)
			}
		})
	}
}

// TestParseConfigPlannerSettings: the planner settings the optimizer has
// flags for reach the replay's settings with the flags' meanings (0 and
// negative values included), and keys left out keep cfg's values.
func TestParseConfigPlannerSettings(t *testing.T) {
	cfg := Config{}
	cfg.Settings.ChurnWeight, cfg.Settings.ChurnRelative, cfg.Settings.ProbeShare = 500, 0.1, 0.02
	if err := LoadConfig("testdata/planner.good.yaml", &cfg); err != nil {
		t.Fatal(err)
	}
	s := cfg.Settings
	if s.ChurnWeight != 0 || s.ChurnRelative != 0.2 || s.ProbeShare != -1 || s.NetworkTTL != 5*time.Minute {
		t.Fatalf("settings %+v", s)
	}
	kept := Config{}
	kept.Settings.ChurnRelative = 0.1
	if err := ParseConfig([]byte("optimizer: {max_utilization: 0.5}\n"), &kept); err != nil || kept.Settings.ChurnRelative != 0.1 {
		t.Fatalf("churn_relative not kept when left out: %v %+v", err, kept.Settings)
	}
}

// TestApplySetsOverridesOverABase: --set overrides change only the keys
// they name, can set a recorded true or non-zero back to false or 0, and
// reject what the config file rejects.
func TestApplySetsOverridesOverABase(t *testing.T) {
	cfg := Config{Window: 2 * time.Second}
	cfg.Settings.StrictResidency, cfg.Settings.MinDemandRPS, cfg.Settings.MaxUtilization = true, 1, 0.9
	err := ApplySets([]string{"optimizer.max_utilization=0.5", "optimizer.strict_residency=false", "optimizer.min_demand_rps=0",
		"optimizer.clusters=[us, eu]", "processor.slide=500ms"}, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Settings
	if s.MaxUtilization != 0.5 || s.StrictResidency || s.MinDemandRPS != 0 || len(s.Clusters) != 2 || cfg.Slide != 500*time.Millisecond || cfg.Window != 2*time.Second {
		t.Fatalf("after --set: %+v", cfg)
	}
	for _, bad := range []string{"optimizer", "optimizer.max_utilization", "max_utilization=1", "optimizer.bogus=1",
		"optimizer.max_utilization=1.5", "optimizer.churn_weight=.nan", "processor.window=-1s", "optimizer.min_demand_rps=-1"} {
		if err := ApplySets([]string{bad}, &Config{}); !errors.Is(err, ErrConfig) {
			t.Errorf("--set %q: err %v, want ErrConfig", bad, err)
		}
	}
}
