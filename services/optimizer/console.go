package optimizer

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/switchyard-llm/switchyard/console"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// serveConsole serves the web console (package console) on addr beside
// the control loop, on the loop's snapshot store and a Kafka client of
// its own. stop ends it and waits for it.
func serveConsole(ctx context.Context, addr string, conn cli.Connection, store *snapshots.Store, log *slog.Logger) (stop func(), err error) {
	cfg := console.Config{Snapshots: store, TopicPrefix: conn.TopicPrefix, Logger: log.With("component", "console")}
	kc, err := conn.NewKafka(console.ClientOpts(cfg)...)
	if err != nil {
		return nil, fmt.Errorf("console: creating kafka client: %w", err)
	}
	cfg.Kafka = kc
	c, err := console.New(cfg)
	if err != nil {
		kc.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		kc.Close()
		return nil, fmt.Errorf("%w: --console-listen: %w", cli.ErrUsage, err)
	}
	log.Info("console serving", "url", "http://"+ln.Addr().String()+"/")
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer kc.Close()
		if err := c.Serve(ctx, ln); err != nil {
			log.Error("console stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}
