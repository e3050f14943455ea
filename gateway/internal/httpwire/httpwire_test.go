package httpwire

import "testing"

func TestAppendHeaderRefusesLineBreaks(t *testing.T) {
	if b := AppendHeader(nil, "A", "x\r\nB: y"); len(b) != 0 {
		t.Errorf("appended %q", b)
	}
	if b := string(AppendHeader(nil, "A", "x y")); b != "A: x y\r\n" {
		t.Errorf("appended %q", b)
	}
}

func TestParseLength(t *testing.T) {
	for _, tt := range []struct {
		in string
		n  int64
		ok bool
	}{
		{"0", 0, true}, {"12", 12, true}, {"999999999999999999", 999999999999999999, true},
		{"", 0, false}, {"+1", 0, false}, {"-1", 0, false}, {"1 ", 0, false}, {"1000000000000000000", 0, false},
	} {
		if n, ok := ParseLength(tt.in); n != tt.n || ok != tt.ok {
			t.Errorf("ParseLength(%q) = %d, %v; want %d, %v", tt.in, n, ok, tt.n, tt.ok)
		}
	}
}
