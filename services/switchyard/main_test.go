package main

import (
	"context"
	"strings"
	"testing"
)

// TestHelpAndVersion: help, of the binary and of every command, goes to
// stdout with exit 0 (no "usage: usage:"); no command is exit 2 on
// stderr; `version` prints the Go version.
func TestHelpAndVersion(t *testing.T) {
	call := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := run(context.Background(), args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		if code, out, errOut := call(args...); code != 0 || !strings.Contains(out, "commands:") || errOut != "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	for _, c := range commands() {
		code, out, errOut := call(c.Name, "--help")
		if code != 0 || errOut != "" || strings.Contains(out, "usage: usage") ||
			(c.Name != "version" && !strings.HasPrefix(out, "usage: switchyard "+c.Name+" ")) {
			t.Errorf("%s --help: exit %d, stdout %.60q, stderr %q", c.Name, code, out, errOut)
		}
	}
	if code, _, errOut := call(); code != 2 || !strings.Contains(errOut, "commands:") {
		t.Fatalf("no command: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := call("gateway", "--bogus"); code != 2 || !strings.Contains(errOut, "bogus") {
		t.Fatalf("bad flag: exit %d, stderr %q", code, errOut)
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}, {"-v"}} {
		if code, out, _ := call(args...); code != 0 || !strings.HasPrefix(out, "switchyard ") || !strings.Contains(out, "go go1.") {
			t.Fatalf("%v: exit %d, %q", args, code, out)
		}
	}
	if code, out, errOut := call("help", "gateway"); code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: switchyard gateway ") ||
		!strings.Contains(out, "--cluster") {
		t.Fatalf("help gateway: exit %d, stdout %.80q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := call("help", "bogus"); code != 2 || !strings.Contains(errOut, `unknown command "bogus"`) {
		t.Fatalf("help bogus: exit %d, stderr %q", code, errOut)
	}
}
