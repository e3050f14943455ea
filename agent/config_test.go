package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestNewErrors(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1")) // never used
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	one := []Target{{ID: "a", URL: "http://a"}}
	if _, err := New(nil, Config{Engines: one}); !errors.Is(err, ErrNoClient) {
		t.Errorf("nil client: err %v, want ErrNoClient", err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no_engines", Config{}},
		{"no_url", Config{Engines: []Target{{ID: "a"}}}},
		{"duplicate", Config{Engines: []Target{{ID: "a", URL: "http://a"}, {ID: "a", URL: "http://b"}}}},
		{"negative_interval", Config{Engines: one, Interval: -time.Second}},
		{"negative_error_log_interval", Config{Engines: one, ErrorLogInterval: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(cl, tc.cfg); err == nil {
				t.Error("New accepted it")
			}
		})
	}
	if _, err := New(cl, Config{Engines: one}); err != nil {
		t.Errorf("valid config: %v", err)
	}
}
