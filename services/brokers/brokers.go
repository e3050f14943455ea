// Package brokers is the `switchyard brokers` command: the embedded NATS
// (JetStream on) and embedded Kafka as a standalone process, so the other
// services can run as separate processes on one machine.
package brokers

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kgo"

	embedded "github.com/switchyard-llm/switchyard/internal/brokers"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams"
)

// Command returns `switchyard brokers`.
func Command() cli.Command {
	return cli.Command{Name: "brokers", Summary: "run the embedded NATS (JetStream) and Kafka brokers", Run: run}
}

func run(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("brokers", flag.ContinueOnError)
	kafkaListen := fs.String("kafka-listen", "127.0.0.1:9092", "host:port of the embedded Kafka broker")
	natsListen := fs.String("nats-listen", "127.0.0.1:4222", "host:port of the embedded NATS server")
	dataDir := fs.String("data-dir", "", "persist Kafka and JetStream data under this directory (empty: Kafka in memory)")
	partitions := fs.Int("partitions", 3, "partitions of each Switchyard topic")
	prefix := fs.String("topic-prefix", streams.DefaultPrefix, "prefix of the Switchyard topics to create")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	b, err := embedded.Start(ctx, embedded.Config{
		KafkaListen: *kafkaListen, NATSListen: *natsListen, DataDir: *dataDir, KafkaPartitions: *partitions,
	})
	if err != nil {
		return err
	}
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.KafkaAddrs()...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	err = streams.EnsureTopics(ctx, cl, streams.TopicsFor(*prefix), int32(*partitions))
	cl.Close()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "kafka: %s\nnats: %s\n", b.KafkaAddrs()[0], b.NATSURL())
	<-ctx.Done()
	return nil
}
