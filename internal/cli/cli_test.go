package cli

import (
	"errors"
	"flag"
	"runtime/debug"
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

// TestParseEmptyEnvironment: a variable set to "" is the same as an unset
// one (README and docs/deploy.md say so): SWITCHYARD_NATS_URL= keeps the
// default URL and SWITCHYARD_INTERVAL= the default interval, with the
// process environment and with an injected getenv alike.
func TestParseEmptyEnvironment(t *testing.T) {
	t.Setenv("SWITCHYARD_NATS_URL", "")
	t.Setenv("SWITCHYARD_INTERVAL", "")
	for name, getenv := range map[string]func(string) string{
		"process": nil,
		"injected": func(k string) string {
			return map[string]string{"SWITCHYARD_NATS_URL": "", "SWITCHYARD_INTERVAL": ""}[k]
		},
	} {
		fs, url, every := flags()
		if err := Parse(fs, nil, getenv); err != nil {
			t.Fatal(err)
		}
		if *url != DefaultNATSURL || *every != time.Second {
			t.Fatalf("%s: nats-url %q interval %v, want the defaults %q and 1s", name, *url, *every, DefaultNATSURL)
		}
	}
	t.Setenv("SWITCHYARD_INTERVAL", "5s")
	fs, url, every := flags()
	if err := Parse(fs, []string{"--nats-url", "nats://x:1"}, nil); err != nil {
		t.Fatal(err)
	}
	if *url != "nats://x:1" || *every != 5*time.Second {
		t.Fatalf("nats-url %q interval %v: the flag must win over the variable, the variable over the default", *url, *every)
	}
}

// TestVersion: the injected version wins over the module's; a build
// without VCS info says so rather than "revision unknown"; a build with it
// names the revision.
func TestVersion(t *testing.T) {
	var b strings.Builder
	Version(&b, "")
	if !strings.HasPrefix(b.String(), "switchyard ") || !strings.Contains(b.String(), "\ngo go1.") {
		t.Fatalf("version output %q", b.String())
	}
	noVCS := &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Path: "example.com/m", Version: "(devel)"}}
	withVCS := &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Path: "example.com/m", Version: "v1.2.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name, injected string
		bi             *debug.BuildInfo
		want, not      []string
	}{
		{"no vcs", "", noVCS, []string{"switchyard (devel)\n", "built without VCS info", "go go1.26"}, []string{"revision ", "unknown"}},
		{"no vcs, injected", "v9.9.9", noVCS, []string{"switchyard v9.9.9\n", "built without VCS info"}, []string{"unknown"}},
		{"vcs", "", withVCS, []string{"switchyard v1.2.0\n", "revision abc123 (modified)"}, []string{"without VCS"}},
		{"no build info", "", nil, []string{"switchyard (devel)\n", "built without VCS info", "go go1."}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			writeVersion(&b, tc.injected, tc.bi)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output %q lacks %q", b.String(), w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(b.String(), n) {
					t.Errorf("output %q has %q", b.String(), n)
				}
			}
		})
	}
}
