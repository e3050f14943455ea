package demo

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/gateway/peers"
	"github.com/switchyard-llm/switchyard/services/internal/peerconn"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// regionGateway is one region's gateway and the clients it was given:
// a snapshot watcher, a producer of routing events, a follower of
// engine signals, and the sharer of its engine load with the other
// regions' gateways (they route to the same engines) on its own NATS
// connection.
type regionGateway struct {
	gw       *gateway.Gateway
	watcher  *snapshots.Watcher
	emitter  *streams.Emitter
	arrivals *streams.Emitter // arrival records, to their own topic
	producer *kgo.Client
	signals  *kgo.Client
	nc       *nats.Conn
	peers    *peers.Sharer
}

// newRegionGateway builds region's gateway on the embedded brokers. Its
// metrics go to reg as they are: they carry their cluster label
// themselves, so the gateways of every region share reg.
func newRegionGateway(region, natsURL string, kafka []string, reg prometheus.Registerer, opts ...gateway.Opt) (*regionGateway, error) {
	topics := streams.TopicsFor("")
	prod, err := kgo.NewClient(append(streams.EmitterProduceOpts(0),
		kgo.SeedBrokers(kafka...), kgo.ClientID("switchyard-gateway-"+region))...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	sig, err := kgo.NewClient(append(streams.FollowOpts(topics.Signals, time.Now().Add(-gateway.SignalLookback)),
		kgo.SeedBrokers(kafka...), kgo.ClientID("switchyard-gateway-signals-"+region))...)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("creating kafka signal client: %w", err)
	}
	em, err := streams.NewEmitter(prod, topics.RoutingEvents, "gateway", 0, reg)
	var arr *streams.Emitter
	if err == nil {
		arr, err = streams.NewEmitter(prod, topics.RoutingArrivals, "gateway_arrivals", 0, reg)
	}
	if err != nil {
		prod.Close()
		sig.Close()
		return nil, err
	}
	rg := &regionGateway{
		watcher:  snapshots.NewWatcher(natsURL, "", region),
		emitter:  em,
		arrivals: arr,
		producer: prod,
		signals:  sig,
	}
	rg.gw, err = gateway.New(region, append(opts,
		gateway.Snapshots(rg.watcher), gateway.Events(rg.emitter), gateway.Arrivals(rg.arrivals), gateway.Signals(streams.NewPoller(sig)), gateway.Registerer(reg), gateway.InstanceID("demo-"+region))...)
	if err != nil {
		rg.close()
		return nil, err
	}
	if rg.nc, err = nats.Connect(natsURL, nats.Name("switchyard-gateway-peers-"+region),
		nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.NoEcho(), nats.Timeout(natsConnectTimeout)); err != nil {
		rg.close()
		return nil, fmt.Errorf("connecting to nats %s for peer load: %w", natsURL, err)
	}
	if rg.peers, err = peers.New(peerconn.New(rg.nc), rg.gw.Pool(), peers.Config{Cluster: region, ID: "demo-" + region, Registerer: reg, PeerClusters: rg.gw.PeerClusters}); err != nil {
		rg.close()
		return nil, err
	}
	return rg, nil
}

// run runs the gateway and its watcher under g until ctx is done; the
// emitters outlive the gateway to send the events of its last requests.
func (rg *regionGateway) run(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return rg.watcher.Run(ctx) })
	g.Go(func() error { return rg.peers.Run(ctx) })
	g.Go(func() error {
		defer rg.close()
		ectx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			var wg sync.WaitGroup
			wg.Go(func() { _ = rg.arrivals.Run(ectx) })
			_ = rg.emitter.Run(ectx) // returns nil once flushed
			wg.Wait()
		}()
		err := rg.gw.Run(ctx)
		stop()
		<-done
		return err
	})
}

func (rg *regionGateway) close() {
	if rg.nc != nil {
		rg.nc.Close()
	}
	rg.signals.Close()
	rg.producer.Close()
}
