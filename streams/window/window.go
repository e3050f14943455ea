// Package window assigns event-time records to sliding windows and decides
// when a window is complete.
//
// Windows are [start, start+Size) with start a multiple of Slide (aligned
// to the Unix epoch); Size must be a multiple of Slide. State is kept per
// pane (one slide long), so memory grows with keys × open panes, never with
// records: a window is the ordered merge of its Size/Slide panes.
//
// Policy (watermark and lateness): the caller advances the watermark
// (AdvanceTo), typically to the event time up to which it has seen all
// input. A window fires once the watermark reaches its end plus
// AllowedLateness, so records may arrive up to AllowedLateness behind the
// watermark. A record whose latest window has already fired is late: it is
// counted and dropped. A record that misses only some of its windows (the
// earlier ones already fired) still counts in the remaining ones.
package window

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// ErrSpec is returned by Spec.Validate for an unusable window spec.
var ErrSpec = errors.New("invalid window spec")

// Spec describes sliding event-time windows.
type Spec struct {
	// Size is the window length. Default 30s.
	Size time.Duration
	// Slide is the distance between window starts; Size must be a
	// multiple of it. Default Size (tumbling windows).
	Slide time.Duration
	// AllowedLateness is how far behind the watermark a record may be and
	// still count. Default 0.
	AllowedLateness time.Duration
}

// WithDefaults fills zero fields with their defaults.
func (s Spec) WithDefaults() Spec {
	if s.Size == 0 {
		s.Size = 30 * time.Second
	}
	if s.Slide == 0 {
		s.Slide = s.Size
	}
	return s
}

// Validate reports whether s is usable (after WithDefaults).
func (s Spec) Validate() error {
	switch {
	case s.Size < time.Millisecond:
		return fmt.Errorf("%w: size %v below 1ms", ErrSpec, s.Size)
	case s.Slide < time.Millisecond || s.Slide > s.Size:
		return fmt.Errorf("%w: slide %v not in [1ms, size %v]", ErrSpec, s.Slide, s.Size)
	case s.Size%s.Slide != 0:
		return fmt.Errorf("%w: size %v not a multiple of slide %v", ErrSpec, s.Size, s.Slide)
	case s.AllowedLateness < 0:
		return fmt.Errorf("%w: negative allowed lateness %v", ErrSpec, s.AllowedLateness)
	}
	return nil
}

// Window is one complete window: its bounds (Unix ms) and its non-empty
// panes in time order.
type Window[P any] struct {
	Start, End int64
	Panes      []Pane[P]
}

// Pane is the state of one slide-long slice of event time.
type Pane[P any] struct {
	Start int64
	State *P
}

// Panes holds the open panes and the watermark. It is not safe for
// concurrent use.
type Panes[P any] struct {
	size, slide, late int64
	newP              func() *P

	panes map[int64]*P
	// last is the pane Pane returned last, starting at lastStart
	// (records come in runs per pane); nil after Fire or Restore.
	last      *P
	lastStart int64
	watermark int64
	// nextStart is the start of the next window to fire; valid when
	// started is true.
	nextStart int64
	started   bool
	fired     bool
}

// New returns empty panes for spec (defaults applied); newP makes the state
// of a new pane.
func New[P any](spec Spec, newP func() *P) (*Panes[P], error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return &Panes[P]{
		size: spec.Size.Milliseconds(), slide: spec.Slide.Milliseconds(), late: spec.AllowedLateness.Milliseconds(),
		newP: newP, panes: map[int64]*P{},
	}, nil
}

// PaneStart returns the start of the pane holding event time t (Unix ms).
func (w *Panes[P]) PaneStart(t int64) int64 {
	r := t % w.slide
	if r < 0 {
		r += w.slide
	}
	return t - r
}

// Pane returns the state of the pane holding event time t, creating it.
// It returns ok=false, and changes nothing, when the record is late (its
// latest window has fired).
func (w *Panes[P]) Pane(t int64) (p *P, start int64, ok bool) {
	ps := w.PaneStart(t)
	if w.started && ps < w.nextStart {
		return nil, ps, false
	}
	first := ps - w.size + w.slide
	if !w.started || (!w.fired && first < w.nextStart) {
		w.nextStart, w.started = first, true
	}
	if w.last != nil && ps == w.lastStart {
		return w.last, ps, true
	}
	p = w.panes[ps]
	if p == nil {
		p = w.newP()
		w.panes[ps] = p
	}
	w.last, w.lastStart = p, ps
	return p, ps, true
}

// AdvanceTo moves the watermark to t (Unix ms); it never goes back.
func (w *Panes[P]) AdvanceTo(t int64) {
	if t > w.watermark {
		w.watermark = t
	}
}

// Watermark is the current watermark (Unix ms).
func (w *Panes[P]) Watermark() int64 { return w.watermark }

// Next is the start of the next window to fire.
func (w *Panes[P]) Next() int64 { return w.nextStart }

// Restore sets the watermark and the next window to fire, as saved by a
// checkpoint. Panes already held are kept.
func (w *Panes[P]) Restore(watermark, next int64) {
	w.watermark, w.nextStart, w.started, w.fired = watermark, next, true, true
	w.last = nil
}

// Get returns the open pane starting at start, or nil.
func (w *Panes[P]) Get(start int64) *P { return w.panes[start] }

// Open is the number of open panes.
func (w *Panes[P]) Open() int { return len(w.panes) }

// Starts returns the starts of the open panes in order.
func (w *Panes[P]) Starts() []int64 {
	out := make([]int64, 0, len(w.panes))
	for s := range w.panes {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Fire returns, in order, the windows that are complete under the current
// watermark and drops the panes no later window needs. Windows without any
// pane are skipped.
func (w *Panes[P]) Fire() []Window[P] {
	if !w.started {
		return nil
	}
	var out []Window[P]
	for w.nextStart+w.size+w.late <= w.watermark {
		starts := w.Starts()
		if len(starts) == 0 {
			break
		}
		// Jump over empty stretches.
		if first := starts[0] - w.size + w.slide; first > w.nextStart {
			w.nextStart = first
			if w.nextStart+w.size+w.late > w.watermark {
				break
			}
		}
		win := Window[P]{Start: w.nextStart, End: w.nextStart + w.size}
		for _, s := range starts {
			if s >= win.Start && s < win.End {
				win.Panes = append(win.Panes, Pane[P]{Start: s, State: w.panes[s]})
			}
		}
		if len(win.Panes) > 0 {
			out = append(out, win)
		}
		w.nextStart += w.slide
		w.fired = true
		for _, s := range starts {
			if s < w.nextStart {
				delete(w.panes, s)
			}
		}
		w.last = nil
	}
	return out
}
