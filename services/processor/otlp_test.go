package processor

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/obs/obstest"
	"github.com/switchyard-llm/switchyard/internal/testenv"
)

// TestCommandExportsOTLP runs `switchyard processor` with only the
// standard OTEL_* variables set: a local OTLP/HTTP endpoint receives its
// series under service.name switchyard-processor.
func TestCommandExportsOTLP(t *testing.T) {
	sink := obstest.NewSink(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
	kc := testenv.Kafka(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Command().Run(ctx, []string{"--kafka-brokers", kc.ListenAddrs()[0], "--partitions", "1", "--metrics-listen", ""}, io.Discard, io.Discard)
	}()
	testenv.Eventually(t, 15*time.Second, func() bool { return sink.HasMetric("switchyard_processor_open_panes") }, "the processor's series pushed by OTLP")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if svc := sink.Services(); len(svc) == 0 || slices.ContainsFunc(svc, func(s string) bool { return s != "switchyard-processor" }) {
		t.Errorf("service.name %q, want switchyard-processor", svc)
	}
}
