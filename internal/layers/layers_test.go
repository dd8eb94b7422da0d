package layers

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	m := func(p string) string { return Module + "/" + p }
	for _, tc := range []struct {
		pkg, imp string
		rule     string // "" for none
	}{
		{m("internal/controller/nodepool"), m("internal/controller/machine"), "no controller imports another"},
		{m("internal/controller/nodepool"), m("internal/controller/nodepool/phases"), ""},
		{m("internal/controller/backup"), m("internal/clusterbackup"), ""},
		{m("internal/controller/backup"), m("internal/manager"), "controllers do not import the manager"},
		{m("internal/deploy/capacity"), m("internal/controller/provreq"), "libraries, runtimes and providers do not import controllers"},
		{m("internal/nodeprovider/local"), m("internal/cli"), "libraries, runtimes and providers do not import controllers"},
		{m("api/v1alpha1"), m("internal/versions"), "api/ is the bottom layer"},
		{m("internal/autoscaler/decide"), "sigs.k8s.io/controller-runtime/pkg/client", "decision code is pure"},
		{m("internal/autoscaler/decide"), m("internal/tenant"), "decision code imports only api/"},
		{m("internal/autoscaler/decide"), m("internal/nodetemplate"), ""},
		{m("internal/manager"), m("internal/cli"), "the manager does not import the CLI"},
		{m("internal/manager"), m("internal/controller/cluster"), ""},
		{m("internal/cli"), m("internal/controller/cluster"), ""},
		{m("internal/image"), m("test/testenv"), "only tests and benchmarks import the test helpers"},
		{m("bench"), m("test/testenv"), ""},
		{m("cmd/fke"), m("internal/cli"), ""},
	} {
		v := Check(tc.pkg, []string{tc.imp})
		switch {
		case tc.rule == "" && len(v) > 0:
			t.Errorf("%s → %s: %v, want no violation", tc.pkg, tc.imp, v)
		case tc.rule != "" && (len(v) != 1 || !strings.Contains(v[0].Rule, tc.rule)):
			t.Errorf("%s → %s: %v, want the rule %q", tc.pkg, tc.imp, v, tc.rule)
		}
	}
}

// TestImportDirection checks every package of the module (non-test
// imports, as go list reports them).
func TestImportDirection(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports", Module+"/...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		for _, v := range Check(p.ImportPath, p.Imports) {
			t.Error(v)
		}
	}
	if n < 50 {
		t.Fatalf("go list reported %d packages; the module has more", n)
	}
}

// TestOneNamePerImport: a package is imported under one name everywhere
// (always its own, or always the same alias), so that a reader meets one
// name for it, as golangci-lint's importas would keep it.
func TestOneNamePerImport(t *testing.T) {
	names := map[string]map[string]string{} // path -> name -> a file using it
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasPrefix(d.Name(), "zz_generated") {
			return nil // generated code names imports its own way
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			name := "(its own name)"
			if im.Name != nil {
				if im.Name.Name == "_" || im.Name.Name == "." {
					continue
				}
				name = im.Name.Name
			}
			if names[path] == nil {
				names[path] = map[string]string{}
			}
			names[path][name] = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, byName := range names {
		if len(byName) > 1 {
			t.Errorf("%s is imported under %d names: %v (one name everywhere)", path, len(byName), byName)
		}
	}
}

// MaxFuncLines is the longest a function may be, in lines: past it, a
// reader wants it split into named steps (as the reconcilers' phases are).
const MaxFuncLines = 120

// longFuncs are the functions allowed past MaxFuncLines, with why.
var longFuncs = map[string]string{
	"internal/manager/manager.go:Run":                    "wires every controller, runtime and provider into the manager, one after the other",
	"internal/managementplane/daemon.go:Daemon":          "the management plane's start order, step by step, each step's error named",
	"cmd/fke-gpu-agent/run.go:runAgent":                  "the agent's start: configuration, NVML, device plugin, labels, health and metrics, in order",
	"internal/controlplane/hosted/render.go:etcdCluster": "one declarative manifest (a StatefulSet and its Services)",
}

// TestFunctionLength: no function of fke's code (tests aside) is longer
// than MaxFuncLines but those listed in longFuncs, and each of those still
// is (a shortened one leaves the list).
func TestFunctionLength(t *testing.T) {
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || strings.HasPrefix(d.Name(), "zz_generated") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			key := filepath.ToSlash(rel) + ":" + fd.Name.Name
			if n <= MaxFuncLines {
				continue
			}
			seen[key] = true
			if _, ok := longFuncs[key]; !ok {
				t.Errorf("%s is %d lines, over %d: split it into named steps (or list it in longFuncs with why)", key, n, MaxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key := range longFuncs {
		if !seen[key] {
			t.Errorf("%s is no longer over %d lines: take it off longFuncs", key, MaxFuncLines)
		}
	}
}
