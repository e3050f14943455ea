// Package switchyard holds no code: its test checks the module's layering,
// that every import points down the architecture (DEVELOPERS.md#layout).
package switchyard

import (
	"errors"
	"go/build"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/switchyard-llm/switchyard"

// mayImport lists, for each top-level directory, the module's top-level
// directories its packages may import (besides their own). services and
// bench are the top: the processes and benchmarks wire everything.
var mayImport = map[string][]string{
	"schemas": {},
	// optimizer is pure math over the schemas (external: stdlibOr below).
	"optimizer": {"schemas"},
	// internal is the plumbing every layer uses (connections, telemetry,
	// wire encoding, embedded brokers); it speaks no library's types.
	"internal":  {},
	"fleet":     {"schemas", "internal"},
	"streams":   {"schemas", "internal", "fleet", "optimizer"},
	"gateway":   {"schemas", "internal", "fleet", "optimizer", "streams"},
	"agent":     {"schemas", "internal", "fleet", "optimizer", "streams"},
	"console":   {"schemas", "internal", "fleet", "optimizer", "streams"},
	"simulator": {"schemas", "internal", "fleet", "optimizer", "streams", "gateway"},
	"bench":     {"schemas", "internal", "fleet", "optimizer", "streams", "gateway", "agent", "console", "simulator"},
	"services":  {"schemas", "internal", "fleet", "optimizer", "streams", "gateway", "agent", "console", "simulator", "services"},
}

// externalOnly restricts the non-module imports of a top-level directory
// to the standard library and these module path prefixes.
var externalOnly = map[string][]string{
	"schemas":   {"google.golang.org/protobuf/"},
	"optimizer": {"gonum.org/v1/gonum/", "google.golang.org/protobuf/"},
}

// testsMayNotImport are the top-level directories no other directory's
// tests import either: a library's tests do not depend on a process.
var testsMayNotImport = []string{"services", "bench"}

type pkg struct {
	rel                  string // path in the module, "." for its root
	imports, testImports []string
}

// packages lists every package of the module under root with its imports.
func packages(t *testing.T, root string) []pkg {
	t.Helper()
	var out []pkg
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if p != root && (name == "testdata" || name == "vendor" || name == "node_modules" ||
			strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		bp, err := build.ImportDir(p, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		out = append(out, pkg{rel: filepath.ToSlash(rel), imports: bp.Imports,
			testImports: append(slices.Clone(bp.TestImports), bp.XTestImports...)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func top(rel string) string {
	top, _, _ := strings.Cut(rel, "/")
	return top
}

// inModule returns imp's path in the module, or false for another module.
func inModule(imp string) (string, bool) {
	if imp == module {
		return ".", true
	}
	return strings.CutPrefix(imp, module+"/")
}

func isStdlib(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".")
}

// violations returns every import of p that points up the architecture.
func violations(p pkg) []string {
	var out []string
	from := top(p.rel)
	allowed, known := mayImport[from]
	for _, imp := range p.imports {
		rel, ok := inModule(imp)
		if !ok {
			if prefixes, ok := externalOnly[from]; ok && !isStdlib(imp) &&
				!slices.ContainsFunc(prefixes, func(pre string) bool { return strings.HasPrefix(imp, pre) }) {
				out = append(out, imp+" (only the standard library and "+strings.Join(prefixes, ", ")+")")
			}
			continue
		}
		to := top(rel)
		if to == from {
			continue
		}
		if !known {
			out = append(out, rel+" (top-level directory "+from+" has no layer)")
			continue
		}
		if !slices.Contains(allowed, to) {
			may := strings.Join(append([]string{from}, allowed...), ", ")
			out = append(out, rel+" ("+from+" imports only "+may+")")
		}
	}
	for _, imp := range p.testImports {
		rel, ok := inModule(imp)
		if !ok {
			continue
		}
		if to := top(rel); to != from && slices.Contains(testsMayNotImport, to) {
			out = append(out, rel+" (in a test: only "+to+" imports "+to+")")
		}
	}
	return out
}

// TestImportsPointDown fails naming every import of a package above its
// layer: libraries never import services/, simulator/ or bench/;
// optimizer imports only schemas and gonum; internal/ imports no library.
func TestImportsPointDown(t *testing.T) {
	pkgs := packages(t, ".")
	if len(pkgs) < 40 {
		t.Fatalf("found %d packages under the module root: not the module", len(pkgs))
	}
	for _, p := range pkgs {
		if p.rel == "." {
			continue
		}
		for _, v := range violations(p) {
			t.Errorf("%s imports %s", path.Join(module, p.rel), v)
		}
	}
}

// TestViolationsNamesUpwardImports checks the checker on made-up packages,
// so that TestImportsPointDown passing means something.
func TestViolationsNamesUpwardImports(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    pkg
		want int
	}{
		{"library importing services", pkg{rel: "gateway", imports: []string{module + "/services/gateway"}}, 1},
		{"streams importing simulator", pkg{rel: "streams/replay", imports: []string{module + "/simulator/workload"}}, 1},
		{"internal importing gateway", pkg{rel: "internal/cli", imports: []string{module + "/gateway"}}, 1},
		{"optimizer importing kgo", pkg{rel: "optimizer", imports: []string{"github.com/twmb/franz-go/pkg/kgo"}}, 1},
		{"optimizer importing streams", pkg{rel: "optimizer/plan", imports: []string{module + "/streams"}}, 1},
		{"library test importing services", pkg{rel: "streams", testImports: []string{module + "/services/demo"}}, 1},
		{"unknown top-level directory", pkg{rel: "tools/x", imports: []string{module + "/schemas"}}, 1},
		{"simulator importing gateway", pkg{rel: "simulator/des", imports: []string{module + "/gateway/pick", "fmt"}}, 0},
		{"optimizer importing gonum", pkg{rel: "optimizer", imports: []string{"gonum.org/v1/gonum/mat", module + "/schemas"}}, 0},
		{"services importing anything", pkg{rel: "services/demo", imports: []string{module + "/simulator/workload", module + "/services/gateway"}}, 0},
		{"own subpackage", pkg{rel: "internal/testenv", imports: []string{module + "/internal/brokers"}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := violations(tc.p); len(got) != tc.want {
				t.Fatalf("violations %q, want %d", got, tc.want)
			}
		})
	}
}
