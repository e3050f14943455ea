package optimizer

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/obs/obstest"
	"github.com/switchyard-llm/switchyard/internal/testenv"
)

// TestCommandExportsOTLP runs `switchyard optimizer` with only the
// standard OTEL_* variables set: a local OTLP/HTTP endpoint receives its
// series under service.name switchyard-optimizer.
func TestCommandExportsOTLP(t *testing.T) {
	sink := obstest.NewSink(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
	kc := testenv.Kafka(t)
	ns := testenv.NATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Command().Run(ctx, []string{"--kafka-brokers", kc.ListenAddrs()[0], "--nats-url", ns.ClientURL(), "--metrics-listen", ""}, io.Discard, io.Discard)
	}()
	testenv.Eventually(t, 15*time.Second, func() bool { return sink.HasMetric("switchyard_optimizer_snapshot_version") }, "the optimizer's series pushed by OTLP")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if svc := sink.Services(); len(svc) == 0 || slices.ContainsFunc(svc, func(s string) bool { return s != "switchyard-optimizer" }) {
		t.Errorf("service.name %q, want switchyard-optimizer", svc)
	}
}
