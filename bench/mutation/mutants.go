package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// edit replaces src[off:end] with text.
type edit struct {
	off, end int
	text     string
}

// mutant is one mutation of one file: a few byte edits, all on one line.
type mutant struct {
	File string `json:"file"` // path relative to the module root
	Line int    `json:"line"`
	Col  int    `json:"col"`
	// Op names the mutation operator: comparison, boundary, minmax,
	// negate, arith, logical, const.
	Op string `json:"op"`
	// From and To are the mutated text before and after.
	From string `json:"from"`
	To   string `json:"to"`

	abs   string // absolute path of the file
	edits []edit
}

func (m mutant) String() string {
	return fmt.Sprintf("%s:%d:%d %s `%s` -> `%s`", m.File, m.Line, m.Col, m.Op, m.From, m.To)
}

// apply returns src with m's edits made.
func (m mutant) apply(src []byte) []byte {
	es := append([]edit(nil), m.edits...)
	sort.Slice(es, func(i, j int) bool { return es[i].off > es[j].off })
	out := append([]byte(nil), src...)
	for _, e := range es {
		out = append(out[:e.off:e.off], append([]byte(e.text), out[e.end:]...)...)
	}
	return out
}

// boundary and flip are the comparison mutations: a boundary moved by
// one (< to <=) and the direction reversed (< to >, min to max); ==
// and != swap.
var (
	boundary = map[token.Token]token.Token{token.LSS: token.LEQ, token.LEQ: token.LSS, token.GTR: token.GEQ, token.GEQ: token.GTR}
	flip     = map[token.Token]token.Token{token.LSS: token.GTR, token.GTR: token.LSS, token.LEQ: token.GEQ, token.GEQ: token.LEQ,
		token.EQL: token.NEQ, token.NEQ: token.EQL}
	arith = map[token.Token]token.Token{token.ADD: token.SUB, token.SUB: token.ADD,
		token.ADD_ASSIGN: token.SUB_ASSIGN, token.SUB_ASSIGN: token.ADD_ASSIGN}
	logical = map[token.Token]token.Token{token.LAND: token.LOR, token.LOR: token.LAND}
)

// fileMutants parses one Go file and returns its mutants in source order.
// Generated files have none.
func fileMutants(abs, rel string) ([]mutant, error) {
	src, err := os.ReadFile(abs)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, abs, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", rel, err)
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	tf := fset.File(f.Pos())
	var out []mutant
	add := func(op string, at token.Pos, from, to string, edits ...edit) {
		p := tf.Position(at)
		// One-line mutations only: every edit on the line of the first.
		for _, e := range edits {
			if tf.Line(tf.Pos(e.off)) != p.Line || tf.Line(tf.Pos(e.end)) != p.Line {
				return
			}
		}
		out = append(out, mutant{File: rel, Line: p.Line, Col: p.Column, Op: op, From: from, To: to, abs: abs, edits: edits})
	}
	tok := func(op string, at token.Pos, from, to token.Token) {
		off := tf.Offset(at)
		add(op, at, from.String(), to.String(), edit{off, off + len(from.String()), to.String()})
	}
	skip := map[ast.Node]bool{} // literals that are not values: array lengths
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ImportSpec, *ast.Field:
			return false
		case *ast.ArrayType:
			if n.Len != nil {
				skip[n.Len] = true
			}
		case *ast.BinaryExpr:
			if to, ok := boundary[n.Op]; ok {
				tok("boundary", n.OpPos, n.Op, to)
			}
			if to, ok := flip[n.Op]; ok {
				tok("comparison", n.OpPos, n.Op, to)
			}
			if to, ok := arith[n.Op]; ok && !isString(n) {
				tok("arith", n.OpPos, n.Op, to)
			}
			if to, ok := logical[n.Op]; ok {
				tok("logical", n.OpPos, n.Op, to)
			}
		case *ast.AssignStmt:
			if to, ok := arith[n.Tok]; ok {
				tok("arith", n.TokPos, n.Tok, to)
			}
		case *ast.IfStmt:
			c := n.Cond
			from := string(src[tf.Offset(c.Pos()):tf.Offset(c.End())])
			add("negate", c.Pos(), from, "!("+from+")", edit{tf.Offset(c.Pos()), tf.Offset(c.Pos()), "!("}, edit{tf.Offset(c.End()), tf.Offset(c.End()), ")"})
		case *ast.CallExpr:
			var id *ast.Ident
			switch fn := n.Fun.(type) {
			case *ast.Ident:
				id = fn
			case *ast.SelectorExpr:
				if x, ok := fn.X.(*ast.Ident); ok && x.Name == "math" {
					id = fn.Sel
				}
			}
			if id != nil {
				if to, ok := map[string]string{"min": "max", "max": "min", "Min": "Max", "Max": "Min"}[id.Name]; ok {
					off := tf.Offset(id.Pos())
					add("minmax", id.Pos(), id.Name, to, edit{off, off + len(id.Name), to})
				}
			}
		case *ast.BasicLit:
			if n.Kind != token.INT || skip[n] {
				return true
			}
			v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
			if err != nil {
				return true
			}
			off := tf.Offset(n.Pos())
			for _, d := range []int64{1, -1} {
				if to := strconv.FormatInt(v+d, 10); v+d >= 0 {
					add("const", n.Pos(), n.Value, to, edit{off, off + len(n.Value), to})
				}
			}
		}
		return true
	})
	return out, nil
}

// isString reports an addition whose operand is a string literal (its
// subtraction would not compile; other non-numeric operands are caught
// as build failures).
func isString(b *ast.BinaryExpr) bool {
	for _, e := range []ast.Expr{b.X, b.Y} {
		if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.STRING {
			return true
		}
	}
	return false
}

// packageMutants returns the mutants of a package's non-test Go files,
// ordered by file, line, column and operator.
func packageMutants(root string, files []string) ([]mutant, error) {
	var out []mutant
	for _, abs := range files {
		rel, err := filepath.Rel(root, abs)
		if err != nil {
			return nil, err
		}
		ms, err := fileMutants(abs, filepath.ToSlash(rel))
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Col != b.Col {
			return a.Col < b.Col
		}
		if a.Op != b.Op {
			return a.Op < b.Op
		}
		return a.To < b.To
	})
	return out, nil
}
