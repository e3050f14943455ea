package kvevents

import "testing"

func TestTrackerClassifiesGapsDuplicatesAndRestarts(t *testing.T) {
	type step struct {
		_       bool
		seq     int64
		want    Verdict
		missing int64
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"in order after the first", []step{{true, 5, First, 0}, {false, 6, InOrder, 0}, {false, 7, InOrder, 0}}},
		{"gap names the first missing", []step{{true, 0, First, 0}, {false, 1, InOrder, 0}, {false, 4, Gap, 2}, {false, 5, InOrder, 0}}},
		{"back to 0 is a restart", []step{{true, 0, First, 0}, {false, 1, InOrder, 0}, {false, 0, Restart, 0}, {false, 1, InOrder, 0}}},
		{"a lower number above 0 is a restart", []step{{true, 0, First, 0}, {false, 9, Gap, 1}, {true, 3, Restart, 0}, {false, 4, InOrder, 0}}},
		{"the same number again is a restart", []step{{true, 0, First, 0}, {false, 1, InOrder, 0}, {false, 1, Restart, 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tr Tracker
			for i, s := range tc.steps {
				v, m := tr.Observe(s.seq)
				if v != s.want || m != s.missing {
					t.Fatalf("step %d: Observe(%d) = %v, %d; want %v, %d", i, s.seq, v, m, s.want, s.missing)
				}
			}
		})
	}
}

func TestParseEnginesReadsReplayAndRejectsDuplicates(t *testing.T) {
	es, err := ParseEngines("a=tcp://h:5557;replay=tcp://h:5558, b=tcp://g:1")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0] != (Engine{ID: "a", Endpoint: "tcp://h:5557", Replay: "tcp://h:5558"}) || es[1] != (Engine{ID: "b", Endpoint: "tcp://g:1"}) {
		t.Fatalf("got %+v", es)
	}
	for _, bad := range []string{"a=tcp://h:1,a=tcp://h:2", "tcp://h:1", "a=tcp://h:1;x=y"} {
		if _, err := ParseEngines(bad); err == nil {
			t.Errorf("ParseEngines(%q) accepted", bad)
		}
	}
}
