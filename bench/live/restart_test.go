package main

import (
	"testing"
	"time"
)

// TestAnalyseRestartTimesTheReturnToThePlannedShare: buckets start at the
// restart; the engine's share per bucket is of its region's served
// requests only, and recovery is the end of the first bucket after the
// restart whose share is at least (1 - tolerance) x the weight planned
// before the kill.
func TestAnalyseRestartTimesTheReturnToThePlannedShare(t *testing.T) {
	start := time.Unix(1000, 0)
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	var sent []sentRequest
	// One request a second to each region; "e" serves 3 of 4 of region
	// a's before the kill at 20 s, none while down, none in the first
	// bucket after the restart at 40 s, half in the second, 3 of 4 after.
	for i := range 80 {
		at := float64(i)
		eng := "other"
		switch {
		case at < 20 && i%4 != 0, at >= 60 && i%4 != 0, at >= 50 && at < 60 && i%2 == 0:
			eng = "e"
		}
		sent = append(sent, sentRequest{Region: "a", At: sec(at), Engine: eng, Served: true},
			sentRequest{Region: "b", At: sec(at), Engine: "e", Served: true})
	}
	sent = append(sent, sentRequest{Region: "a", At: sec(25), Failure: "status 502"})
	res := analyseRestart(restartInput{
		Region: "a", Engine: "e", Start: start, Killed: sec(20), Started: sec(39), Restarted: sec(40), End: sec(80),
		Bucket: sec(10), Tolerance: 0.2, Sent: sent,
		Weights: []plannedWeight{{At: start, Weight: 0.75}, {At: start.Add(sec(22)), Weight: 0}, {At: start.Add(sec(45)), Weight: 0.75}},
	})
	if len(res.Buckets) != 8 || res.Buckets[0].From != -40 || res.Buckets[4].From != 0 {
		t.Fatalf("buckets %+v, want 8 from -40 s", res.Buckets)
	}
	if res.PlannedBefore != 0.75 || res.ShareBefore != 0.75 {
		t.Errorf("before the kill: planned %v share %v, want 0.75 and 0.75", res.PlannedBefore, res.ShareBefore)
	}
	if b := res.Buckets[2]; b.Sent != 11 || b.Failed != 1 || *b.Share != 0 || b.Phase != "down" {
		t.Errorf("bucket 20-30 s: %+v", b)
	}
	if p := res.Buckets[4].Planned; p != 0.375 {
		t.Errorf("bucket 40-50 s planned %v, want the mean 0.375 (0 then 0.75)", p)
	}
	if res.RecoveredS == nil || *res.RecoveredS != 30 || !res.Held {
		t.Errorf("recovered %v held %v, want 30 s after the restart and held", res.RecoveredS, res.Held)
	}
	if res.RecoveredShareS == nil || *res.RecoveredShareS != 30 {
		t.Errorf("back to the share before the kill at %v, want 30 s", res.RecoveredShareS)
	}
}
