// Package tap implements `switchyard tap TOPIC`: print a range of any of
// Switchyard's Kafka topics as JSON lines (streams/tap).
package tap

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/settings"
	"github.com/switchyard-llm/switchyard/streams/tap"
)

// Command returns the `tap` subcommand.
func Command() cli.Command {
	return cli.Command{
		Name:    "tap",
		Summary: "print a Kafka topic's records as JSON lines (any Switchyard topic; --from/--to/--follow/--key/--partition)",
		Run:     run,
	}
}

// shortNames are the short names of the project's topics, under
// --topic-prefix (Resolve).
const shortNames = "signals, routing-events, routing-arrivals, estimates, deadletter, kv-events, checkpoints, settings"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tap", flag.ContinueOnError)
	from := fs.String("from", "beginning", "first record: beginning, end or an RFC 3339 time (the first record at or after it)")
	to := fs.String("to", "end", "stop before: end (the end when tap starts), beginning or an RFC 3339 time; tap exits 0 there")
	follow := fs.Bool("follow", false, "keep printing new records until interrupted (no --to)")
	key := fs.String("key", "", "only records with this key")
	partition := fs.Int("partition", -1, "only this partition (-1: all)")
	var conn cli.Connection
	conn.RegisterKafka(fs)
	// Flags may follow the topic: parse what comes after it too.
	var topic string
	rest := args
	if len(rest) > 0 && len(rest[0]) > 0 && rest[0][0] != '-' {
		topic, rest = rest[0], rest[1:]
	}
	if err := cli.Parse(fs, rest, nil); err != nil {
		return err
	}
	if topic == "" && fs.NArg() > 0 {
		topic = fs.Arg(0)
		if fs.NArg() > 1 {
			return fmt.Errorf("%w: one topic, got %q\n%s", cli.ErrUsage, fs.Args(), cli.Usage(fs))
		}
	} else if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	if topic == "" {
		return fmt.Errorf("%w: tap TOPIC: a topic name, or one of %s (under --topic-prefix)\n%s", cli.ErrUsage, shortNames, cli.Usage(fs))
	}
	o := tap.Options{Topic: Resolve(topic, conn.TopicPrefix), Follow: *follow, Partition: int32(*partition)}
	var err error
	if o.From, err = tap.ParsePosition(*from); err != nil {
		return fmt.Errorf("%w: --from: %w", cli.ErrUsage, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *follow && set["to"] {
		return fmt.Errorf("%w: --follow reads until interrupted; it takes no --to", cli.ErrUsage)
	}
	if !*follow {
		if o.To, err = tap.ParsePosition(*to); err != nil {
			return fmt.Errorf("%w: --to: %w", cli.ErrUsage, err)
		}
	}
	o.Key, o.HasKey = *key, set["key"]
	cl, err := conn.NewKafka(kgo.ClientID("switchyard-tap"))
	if err != nil {
		return fmt.Errorf("connecting to Kafka %s: %w", conn.KafkaBrokers, err)
	}
	defer cl.Close()
	n, err := tap.Tap(ctx, cl, o, stdout)
	if errors.Is(err, tap.ErrUsage) {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "tap: %d records from %s\n", n, o.Topic)
	return nil
}

// Resolve maps a short topic name (signals, routing-events,
// routing-arrivals, estimates,
// deadletter, kv-events, checkpoints, settings) to its full name under prefix; any other name
// is a full name already.
func Resolve(name, prefix string) string {
	t := streams.TopicsFor(prefix)
	switch name {
	case "signals":
		return t.Signals
	case "routing-events", "events":
		return t.RoutingEvents
	case "routing-arrivals", "arrivals":
		return t.RoutingArrivals
	case "estimates":
		return t.Estimates
	case "deadletter", "dlq":
		return t.DeadLetter
	case "kv-events", "kvevents":
		return t.KVEvents
	case "checkpoints":
		return process.CheckpointTopic(prefix)
	case "settings":
		return settings.Topic(prefix)
	}
	return name
}
