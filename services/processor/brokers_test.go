package processor

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/switchyard-llm/switchyard/internal/testenv"
)

// TestCommandWaitsForKafka: started with Kafka down, the processor logs
// the WARN and keeps waiting instead of exiting; once Kafka listens it
// logs the INFO and runs; stopped, it returns nil.
func TestCommandWaitsForKafka(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there until kfake does
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Command().Run(ctx, []string{"--kafka-brokers", ln.Addr().String(), "--metrics-listen", "", "--partitions", "1"}, nil, &stderr)
	}()
	testenv.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(stderr.String(), `level=WARN msg="broker unavailable" broker=kafka`)
	}, "the WARN of Kafka down at start")
	select {
	case err := <-done:
		t.Fatalf("the processor exited with Kafka down at start: %v\n%s", err, stderr.String())
	default:
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	testenv.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(stderr.String(), `level=INFO msg="broker available again" broker=kafka`)
	}, "the INFO of Kafka back")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("processor returned %v after its context ended\n%s", err, stderr.String())
	}
}
