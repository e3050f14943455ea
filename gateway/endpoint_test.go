package gateway

import (
	"net/url"
	"testing"
)

// parsedEndpoint is checkEndpoint's verdict from url.Parse alone.
func parsedEndpoint(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		u.RawQuery == "" && u.Fragment == "" && u.User == nil
}

var endpointCases = []struct {
	s     string
	plain bool
}{
	{"http://e-00001.engines.example.net:8000", true},
	{"https://10.0.0.7:8443/v1", true},
	{"http://a", true},
	{"http://engine-1:80/x/y.z~w_v-u/", true},
	{"http://engine_1", false},
	{"http://a:", false}, // url.Parse accepts it; left to it
	{"HTTP://a", false},
	{"http://", false},
	{"http:///x", false},
	{"http://:80", false},
	{"http://-a", false},
	{"http://a:80x", false},
	{"http://a?q=1", false},
	{"http://a/#f", false},
	{"http://u:p@a", false},
	{"http://[::1]:80", false},
	{"http://a/%41", false},
	{"http://a b", false},
	{"ftp://a", false},
	{"", false},
}

// TestEndpointPlain: the plain form is recognised, everything else is
// left to url.Parse, and checkEndpoint's verdicts are url.Parse's.
func TestEndpointPlain(t *testing.T) {
	for _, c := range endpointCases {
		if got := endpointPlain(c.s); got != c.plain {
			t.Errorf("endpointPlain(%q) = %v, want %v", c.s, got, c.plain)
		}
		if got, want := checkEndpoint(c.s) == nil, parsedEndpoint(c.s); got != want {
			t.Errorf("checkEndpoint(%q) accepts: %v, url.Parse: %v", c.s, got, want)
		}
	}
}

// FuzzEndpointPlain: every string endpointPlain accepts, url.Parse
// accepts as an absolute http(s) URL with a host and no query, fragment
// or user info.
func FuzzEndpointPlain(f *testing.F) {
	for _, c := range endpointCases {
		f.Add(c.s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if endpointPlain(s) && !parsedEndpoint(s) {
			t.Fatalf("endpointPlain accepts %q, url.Parse does not", s)
		}
	})
}
