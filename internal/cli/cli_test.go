package cli

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func flags() (*flag.FlagSet, *string, *time.Duration) {
	fs := flag.NewFlagSet("thing", flag.ContinueOnError)
	url := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	every := fs.Duration("interval", time.Second, "how often")
	return fs, url, every
}

// TestParseHelp: -h and --help return the command's flags as a
// *HelpError, which is ErrHelp and (for callers that know only that)
// ErrUsage; other bad flags are ErrUsage but not ErrHelp.
func TestParseHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		fs, _, _ := flags()
		err := Parse(fs, []string{arg}, func(string) string { return "" })
		var help *HelpError
		if !errors.As(err, &help) || !errors.Is(err, ErrHelp) || !errors.Is(err, ErrUsage) {
			t.Fatalf("%s: err %v", arg, err)
		}
		if !strings.HasPrefix(help.Text, "usage: switchyard thing [flags]") || strings.Contains(help.Text, "usage: usage") ||
			!strings.Contains(help.Text, "--nats-url (env SWITCHYARD_NATS_URL") {
			t.Fatalf("%s: help text %q", arg, help.Text)
		}
	}
	fs, _, _ := flags()
	if err := Parse(fs, []string{"--bogus"}, nil); !errors.Is(err, ErrUsage) || errors.Is(err, ErrHelp) {
		t.Fatalf("--bogus: err %v", err)
	}
}

// TestParseEmptyEnvironment: a variable set to "" sets a string flag to ""
// (SWITCHYARD_NATS_URL= turns NATS off as --nats-url "" does) and leaves
// other flags at their defaults; unset variables change nothing.
func TestParseEmptyEnvironment(t *testing.T) {
	t.Setenv("SWITCHYARD_NATS_URL", "")
	t.Setenv("SWITCHYARD_INTERVAL", "")
	fs, url, every := flags()
	if err := Parse(fs, nil, nil); err != nil {
		t.Fatal(err)
	}
	if *url != "" || *every != time.Second {
		t.Fatalf("nats-url %q interval %v, want \"\" and 1s", *url, *every)
	}
	t.Setenv("SWITCHYARD_INTERVAL", "5s")
	fs, url, every = flags()
	if err := Parse(fs, []string{"--nats-url", "nats://x:1"}, nil); err != nil {
		t.Fatal(err)
	}
	if *url != "nats://x:1" || *every != 5*time.Second {
		t.Fatalf("nats-url %q interval %v: the flag must win over the variable, the variable over the default", *url, *every)
	}
}

func TestVersion(t *testing.T) {
	var b strings.Builder
	Version(&b)
	if !strings.HasPrefix(b.String(), "switchyard ") || !strings.Contains(b.String(), "\ngo go1.") {
		t.Fatalf("version output %q", b.String())
	}
}
