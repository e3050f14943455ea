package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// snapshotsCmd writes one line per snapshot of the audit stream: what the
// plan was made for (demand, offered, shed) and, per engine, its weight,
// planned utilization and the capacity that implies (weight × routed
// demand / utilization), so a cell's refusals can be read against the
// planner's capacity estimate.
func snapshotsCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("snapshots", flag.ContinueOnError)
	url := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server holding the snapshot audit stream")
	cluster := fs.String("cluster", "live", "cluster whose weights to print")
	timeout := fs.Duration("timeout", 10*time.Second, "time limit for reading the stream")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, err := nats.Connect(*url)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("opening jetstream: %w", err)
	}
	store, err := snapshots.Lookup(ctx, js)
	if err != nil {
		return err
	}
	fmt.Println("time      demand  offered  rejected  shed   engine:weight/util/capacity ...")
	var werr error
	err = store.ReadAudit(ctx, snapshots.AuditFrom{}, func(e snapshots.AuditEntry) bool {
		if e.Err != nil {
			fmt.Fprintln(os.Stderr, "live snapshots: seq", e.Seq, e.Err)
			return true
		}
		for _, c := range e.Snapshot.GetClusters() {
			if c.GetCluster() == *cluster {
				werr = writeSnapshotLine(os.Stdout, e.Snapshot, c)
			}
		}
		return werr == nil
	})
	if err != nil {
		return err
	}
	return werr
}

func writeSnapshotLine(w io.Writer, s *schemas.WeightSnapshot, c *schemas.ClusterWeights) error {
	d := c.GetDemandEstimate()
	var offered, rejected float64
	if win := float64(d.GetWindowEndUnixMs()-d.GetWindowStartUnixMs()) / 1000; win > 0 {
		offered = float64(d.GetRequestCount()) / win
		rejected = float64(d.GetRejectedCount()) / win
	}
	routed := c.GetDemandRps() * (1 - c.GetShedFraction())
	ws := slices.Clone(c.GetWeights())
	slices.SortFunc(ws, func(a, b *schemas.EngineWeight) int { return strings.Compare(a.GetEngineId(), b.GetEngineId()) })
	var b strings.Builder
	for _, ew := range ws {
		capRPS := 0.0
		if u := ew.GetPlannedUtilization(); u > 0 {
			capRPS = ew.GetWeight() * routed / u
		}
		fmt.Fprintf(&b, "  %s:%.2f/%.2f/%.2f", ew.GetEngineId(), ew.GetWeight(), ew.GetPlannedUtilization(), capRPS)
	}
	t := time.UnixMilli(int64(s.GetVersion())).UTC().Format("15:04:05")
	_, err := fmt.Fprintf(w, "%s  %6.2f  %7.2f  %8.2f  %.3f%s\n", t, c.GetDemandRps(), offered, rejected, c.GetShedFraction(), b.String())
	return err
}
