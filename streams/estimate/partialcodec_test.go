package estimate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"
)

// TestPaneCodecCoversEveryField fails when an accumulator gains a field
// that AppendPane and DecodePane do not carry (a partial handed between
// processor instances would silently lose it).
func TestPaneCodecCoversEveryField(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{{Engine{}, 34}, {Demand{}, 9}, {Network{}, 7}, {clusterPane{}, 2}, {Tries{}, 2}} {
		if n := reflect.TypeOf(c.v).NumField(); n != c.want {
			t.Errorf("%T has %d fields, the pane codec carries %d: update partialcodec.go and this test", c.v, n, c.want)
		}
	}
}

// FuzzDecodePane: any bytes decode to a pane or ErrPaneEncoding, never a
// panic, and a decoded pane re-encodes to bytes that decode to the same
// encoding.
func FuzzDecodePane(f *testing.F) {
	f.Add(AppendPane(nil, NewPane()))
	p := NewPane()
	p.engines["e1"] = &Engine{lastMs: 5, gpuClass: "h100", signals: 2, running: 3.5}
	p.engines["e1"].ttft[3] = bin{w: 1, wu: 0.5, wl: 20}
	p.clusters["us"] = &clusterPane{demand: Demand{requests: 3, tokened: 2, outputSum: 200, rejected: 2, shedSnapshot: 1, shedAdmission: 1},
		network: map[string]*Network{"e1": {rttSum: 1 << 22, rttN: 2, unsized: 1}}}
	p.networks = 1
	p.tries["e1"] = &Tries{attempts: 7, failures: 4}
	f.Add(AppendPane(nil, p))
	v1 := AppendPane(nil, NewPane())
	v1[0] = paneCodecVersionV1
	f.Add(v1[:len(v1)-1])
	f.Add([]byte{paneCodecVersion, 1, 2, 'e', '1'})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodePane(b)
		if err != nil {
			if !errors.Is(err, ErrPaneEncoding) {
				t.Fatalf("error %v is not ErrPaneEncoding", err)
			}
			return
		}
		enc := AppendPane(nil, q)
		r, err := DecodePane(enc)
		if err != nil {
			t.Fatalf("re-encoded pane does not decode: %v", err)
		}
		if again := AppendPane(nil, r); !bytes.Equal(again, enc) {
			t.Fatal("re-encoding is not stable")
		}
		if r.Entities() != q.Entities() {
			t.Fatalf("%d entities after a round trip, want %d", r.Entities(), q.Entities())
		}
	})
}

// TestDecodePaneV2: a pane written by version 2 of the codec (before
// engines carried their KV capacity) decodes to the same pane with no
// capacity.
func TestDecodePaneV2(t *testing.T) {
	p := NewPane()
	p.engines["e1"] = &Engine{lastMs: 5, gpuClass: "h100", signals: 2, running: 3.5, kvCap: 12345.5}
	p.tries["e1"] = &Tries{attempts: 7, failures: 4}
	v3 := AppendPane(nil, p)
	capBytes := binary.LittleEndian.AppendUint64(nil, math.Float64bits(12345.5))
	at := bytes.Index(v3, capBytes)
	if at < 0 || bytes.Count(v3, capBytes) != 1 {
		t.Fatal("capacity not found once in the encoding")
	}
	// And the engine's model count (0) after its profiles.
	mc := at + 8 + 2*len(Engine{}.ttft)*3*8
	if v3[mc] != 0 {
		t.Fatal("model count not found after the profiles")
	}
	v2 := append(append(append([]byte{2}, v3[1:at]...), v3[at+8:mc]...), v3[mc+1:]...)
	q, err := DecodePane(v2)
	if err != nil {
		t.Fatal(err)
	}
	p.engines["e1"].kvCap = 0
	if !bytes.Equal(AppendPane(nil, q), AppendPane(nil, p)) {
		t.Fatal("version 2 pane decodes to another pane")
	}
	if _, err := DecodePane(append([]byte{paneCodecVersion + 1}, v3[1:]...)); !errors.Is(err, ErrPaneEncoding) {
		t.Fatalf("version %d: %v, want ErrPaneEncoding", paneCodecVersion+1, err)
	}
}

// TestDecodePaneV3: a pane written by version 3 of the codec (before
// clusters carried their rejected requests) decodes to the same pane
// with none rejected, and one written by version 4 (before the requests
// by model) to the same pane with none by model; version 5 carries both.
func TestDecodePaneV3(t *testing.T) {
	p := NewPane()
	p.clusters["us"] = &clusterPane{demand: Demand{requests: 9, tokened: 2, rejected: 5, shedSnapshot: 2, shedAdmission: 3}, network: map[string]*Network{}}
	p.clusters["us"].demand.addModel("m", 9)
	v5 := AppendPane(nil, p)
	q, err := DecodePane(v5)
	if err != nil {
		t.Fatal(err)
	}
	if d := q.clusters["us"].demand; !reflect.DeepEqual(d, p.clusters["us"].demand) {
		t.Fatalf("version 5 round trip: %+v, want %+v", d, p.clusters["us"].demand)
	}
	// Versions 3 and 4: the three counts (one byte each) after the four
	// demand floats, and the model count and model ("m", 9), are not
	// there.
	at := bytes.Index(v5, []byte{5, 2, 3, 1, 1, 'm', 9, 0}) // rejected, snapshot, admission, models, network count
	if at < 0 {
		t.Fatal("rejected counts not found in the encoding")
	}
	v4 := append(append([]byte{4}, v5[1:at+3]...), v5[at+7:]...)
	v3 := append(append([]byte{3}, v5[1:at]...), v5[at+7:]...)
	p.clusters["us"].demand.models = nil
	q, err = DecodePane(v4)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(AppendPane(nil, q), AppendPane(nil, p)) {
		t.Fatal("version 4 pane decodes to another pane")
	}
	q, err = DecodePane(v3)
	if err != nil {
		t.Fatal(err)
	}
	p.clusters["us"].demand.rejected, p.clusters["us"].demand.shedSnapshot, p.clusters["us"].demand.shedAdmission = 0, 0, 0
	if !bytes.Equal(AppendPane(nil, q), AppendPane(nil, p)) {
		t.Fatal("version 3 pane decodes to another pane")
	}
}
