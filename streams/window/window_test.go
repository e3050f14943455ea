package window

import (
	"fmt"
	"testing"
	"time"
)

type count struct{ n int }

func TestPanes(t *testing.T) {
	type ev struct {
		t   int64 // event time (ms); -1 advances the watermark to adv
		adv int64
	}
	for _, tc := range []struct {
		name     string
		spec     Spec
		events   []ev
		want     string // fired windows as start-end:count
		wantLate int
	}{
		{
			name:   "tumbling",
			spec:   Spec{Size: 10 * time.Millisecond},
			events: []ev{{t: 1}, {t: 5}, {t: 12}, {t: -1, adv: 20}},
			want:   "[0-10:2 10-20:1]",
		},
		{
			name:   "sliding",
			spec:   Spec{Size: 10 * time.Millisecond, Slide: 5 * time.Millisecond},
			events: []ev{{t: 1}, {t: 6}, {t: 11}, {t: -1, adv: 20}},
			want:   "[-5-5:1 0-10:2 5-15:2 10-20:1]",
		},
		{
			name:   "lateness_holds_windows",
			spec:   Spec{Size: 10 * time.Millisecond, AllowedLateness: 5 * time.Millisecond},
			events: []ev{{t: 1}, {t: -1, adv: 12}, {t: 3}, {t: -1, adv: 15}},
			want:   "[0-10:2]",
		},
		{
			name:     "late_record_dropped",
			spec:     Spec{Size: 10 * time.Millisecond},
			events:   []ev{{t: 1}, {t: -1, adv: 10}, {t: 3}, {t: 12}, {t: -1, adv: 20}},
			want:     "[0-10:1 10-20:1]",
			wantLate: 1,
		},
		{
			name:   "gap_skipped",
			spec:   Spec{Size: 10 * time.Millisecond},
			events: []ev{{t: 1}, {t: 100001}, {t: -1, adv: 200000}},
			want:   "[0-10:1 100000-100010:1]",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := New(tc.spec, func() *count { return &count{} })
			if err != nil {
				t.Fatal(err)
			}
			var fired []string
			late := 0
			for _, e := range tc.events {
				if e.t == -1 {
					w.AdvanceTo(e.adv)
					for _, win := range w.Fire() {
						n := 0
						for _, p := range win.Panes {
							n += p.State.n
						}
						fired = append(fired, fmt.Sprintf("%d-%d:%d", win.Start, win.End, n))
					}
					continue
				}
				p, _, ok := w.Pane(e.t)
				if !ok {
					late++
					continue
				}
				p.n++
			}
			if got := fmt.Sprint(fired); got != tc.want {
				t.Errorf("fired %s, want %s", got, tc.want)
			}
			if late != tc.wantLate {
				t.Errorf("late = %d, want %d", late, tc.wantLate)
			}
		})
	}
}

func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		ok   bool
	}{
		{Spec{Size: time.Second}, true},
		{Spec{Size: time.Second, Slide: 250 * time.Millisecond}, true},
		{Spec{Size: time.Second, Slide: 300 * time.Millisecond}, false},
		{Spec{Size: time.Second, Slide: 2 * time.Second}, false},
		{Spec{Size: time.Second, AllowedLateness: -1}, false},
	} {
		if err := tc.spec.WithDefaults().Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.spec, err)
		}
	}
}

func TestRestore(t *testing.T) {
	w, _ := New(Spec{Size: 10 * time.Millisecond}, func() *count { return &count{} })
	w.Restore(25, 20)
	if _, _, ok := w.Pane(15); ok {
		t.Error("record in a window fired before the checkpoint was accepted")
	}
	p, _, ok := w.Pane(22)
	if !ok {
		t.Fatal("record in an open window rejected")
	}
	p.n++
	w.AdvanceTo(30)
	if got := w.Fire(); len(got) != 1 || got[0].Start != 20 {
		t.Errorf("fired %+v", got)
	}
}
