package pcrunner_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEveryMutexSaysWhatItGuards: each struct field of type sync.Mutex or
// sync.RWMutex (named, embedded or behind a pointer) in the non-test code
// under cmd/ and internal/ carries a doc or line comment, which says what
// the lock guards or serialises (ARCHITECTURE.md invariant 6). Files are
// parsed, not built, so every build tag's and every GOOS's files count.
func TestEveryMutexSaysWhatItGuards(t *testing.T) {
	fset := token.NewFileSet()
	for _, root := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, pos := range uncommentedMutexFields(f) {
				t.Errorf("%s: a %s field without a comment saying what it guards", fset.Position(pos.at), pos.typ)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

type mutexField struct {
	at  token.Pos
	typ string
}

// uncommentedMutexFields lists f's struct fields of a sync lock type that
// have neither a doc nor a line comment.
func uncommentedMutexFields(f *ast.File) []mutexField {
	syncName := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "sync" {
			syncName = "sync"
			if imp.Name != nil {
				syncName = imp.Name.Name
			}
		}
	}
	if syncName == "" || syncName == "_" {
		return nil
	}
	var out []mutexField
	ast.Inspect(f, func(n ast.Node) bool {
		st, ok := n.(*ast.StructType)
		if !ok {
			return true
		}
		for _, field := range st.Fields.List {
			typ := field.Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			sel, ok := typ.(*ast.SelectorExpr)
			if !ok {
				continue
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || pkg.Name != syncName || (sel.Sel.Name != "Mutex" && sel.Sel.Name != "RWMutex") {
				continue
			}
			if field.Doc == nil && field.Comment == nil {
				out = append(out, mutexField{at: field.Pos(), typ: "sync." + sel.Sel.Name})
			}
		}
		return true
	})
	return out
}
