package combiner

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/cli"
)

func TestCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "10s", "--slide", "3s"},
		{"--allowed-lateness", "-1s"},
		{"--no-such-flag"},
		{"--kafka-brokers", " "},
	} {
		err := Command().Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}

// TestMetricsCountWindows: the hooks count every acknowledged estimate
// and one window per later window end, and ignore failed produces and
// other topics.
func TestMetricsCountWindows(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := Metrics(reg, "m")
	if err != nil {
		t.Fatal(err)
	}
	m := h.(*metrics)
	end := time.UnixMilli(1_000_000)
	for _, r := range []struct {
		topic string
		at    time.Time
		err   error
	}{
		{"m.estimates", end, nil},
		{"m.estimates", end, nil},
		{"m.estimates", end.Add(5 * time.Second), nil},
		{"m.estimates", end.Add(10 * time.Second), errors.New("not acknowledged")},
		{"m.signals", end.Add(20 * time.Second), nil},
	} {
		m.OnProduceRecordUnbuffered(&kgo.Record{Topic: r.topic, Timestamp: r.at}, r.err)
	}
	m.OnFetchRecordBuffered(&kgo.Record{Topic: "m.processor.partials", Key: []byte("m.signals/0"), Value: []byte{2}})
	m.OnFetchRecordBuffered(&kgo.Record{Topic: "m.processor.partials", Key: []byte("m.signals/0/0000000000000007/0"), Value: []byte{1}}) // a chunk
	m.OnFetchRecordBuffered(&kgo.Record{Topic: "m.signals"})
	for name, want := range map[string]float64{"published": 3, "windows": 2, "read": 1, "end": 1005} {
		var got float64
		switch name {
		case "published":
			got = value(t, m.published)
		case "windows":
			got = value(t, m.windows)
		case "read":
			got = value(t, m.read)
		case "end":
			got = value(t, m.windowEnd)
		}
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
