package gateway

import (
	"errors"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// brokerClients are the module paths of the broker clients the gateway
// library takes only behind its own small interfaces (SignalFetcher,
// peers.Conn); the services adapt their clients to them.
var brokerClients = []string{"github.com/twmb/franz-go", "github.com/nats-io/nats.go"}

// brokerTypesInAPI returns "file: name mentions pkg.Sel" for every
// exported declaration of the package in dir (exported fields and
// methods included) that names a type of a broker client.
func brokerTypesInAPI(t *testing.T, dir string) []string {
	t.Helper()
	bp, err := build.ImportDir(dir, 0)
	var noGo *build.NoGoError
	if errors.As(err, &noGo) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	names := map[*ast.File]map[string]string{} // import name -> path, by file
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		names[f] = map[string]string{}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			name := strings.TrimSuffix(path.Base(ip), ".go")
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[f][name] = ip
		}
	}
	var out []string
	fileOf := func(pos token.Pos) *ast.File {
		for _, f := range files {
			if f.FileStart <= pos && pos <= f.FileEnd {
				return f
			}
		}
		return nil
	}
	check := func(what string, n ast.Node) {
		if n == nil {
			return
		}
		f := fileOf(n.Pos())
		ast.Inspect(n, func(n ast.Node) bool {
			if _, ok := n.(*ast.BlockStmt); ok {
				return false // a function's body is not its API
			}
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && f != nil {
				for _, c := range brokerClients {
					if ip := names[f][id.Name]; ip == c || strings.HasPrefix(ip, c+"/") {
						out = append(out, filepath.Base(fset.Position(n.Pos()).Filename)+": "+what+" mentions "+id.Name+"."+sel.Sel.Name)
					}
				}
			}
			return true
		})
	}
	d, err := doc.NewFromFiles(fset, files, dir, doc.PreserveAST)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range append(d.Consts, d.Vars...) {
		check(strings.Join(v.Names, ", "), v.Decl)
	}
	for _, fn := range d.Funcs {
		check(fn.Name, fn.Decl)
	}
	for _, ty := range d.Types {
		check(ty.Name, ty.Decl)
		for _, v := range append(ty.Consts, ty.Vars...) {
			check(strings.Join(v.Names, ", "), v.Decl)
		}
		for _, fn := range append(ty.Funcs, ty.Methods...) {
			check(ty.Name+"."+fn.Name, fn.Decl)
		}
	}
	return out
}

// notYet are the mentions still to go, each "file: name mentions
// pkg.Sel" (none: peers.Conn has its own Subscription since issue 26).
var notYet = map[string]bool{}

// TestAPINamesNoBrokerClientType: the exported API of the gateway
// library, every package but gateway/internal, names no franz-go or
// nats.go type (kgo, kadm, kmsg, nats, jetstream): callers pass their
// Kafka and NATS clients behind the library's own interfaces.
func TestAPINamesNoBrokerClientType(t *testing.T) {
	dirs := 0
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if p == "internal" || p == "testdata" {
			return filepath.SkipDir
		}
		dirs++
		for _, v := range brokerTypesInAPI(t, p) {
			v = "gateway/" + path.Join(filepath.ToSlash(p), v)
			if _, ok := notYet[v]; ok {
				notYet[v] = true
				continue
			}
			t.Errorf("%s", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for v, seen := range notYet {
		if !seen {
			t.Errorf("%s no longer: remove it from notYet", v)
		}
	}
	if dirs < 5 {
		t.Fatalf("walked %d directories: not the gateway library", dirs)
	}
}

// TestBrokerTypesInAPIFindsThem checks the checker on a package whose API
// names franz-go and nats.go types, exported fields and methods
// included, and whose unexported code and function bodies use more.
func TestBrokerTypesInAPIFindsThem(t *testing.T) {
	dir := t.TempDir()
	src := `package x

import (
	"context"

	"github.com/nats-io/nats.go"
	franz "github.com/twmb/franz-go/pkg/kgo"
)

func Opts() []franz.Opt { return nil }

type Fetcher interface{ PollFetches(ctx context.Context) franz.Fetches }

type Config struct {
	Conn *nats.Conn
	hidden *nats.Msg
}

func (Config) Handler() nats.MsgHandler { return nil }

func Body() { _ = franz.NewOffset() }

func unexported() *nats.Conn { return nil }
`
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := brokerTypesInAPI(t, dir)
	want := []string{"Opts mentions franz.Opt", "Fetcher mentions franz.Fetches", "Config mentions nats.Conn", "Config.Handler mentions nats.MsgHandler"}
	if len(got) != len(want) {
		t.Fatalf("found %q, want %q", got, want)
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || strings.HasSuffix(g, w)
		}
		if !found {
			t.Errorf("missing %q in %q", w, got)
		}
	}
}
