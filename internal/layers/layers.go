// Package layers states the import direction of fke's code and checks it:
//
//	api → pure decision code → libraries, runtimes and providers → controllers → manager and cli
//
// A package imports only from its own layer or those before it, with one
// more rule inside the controllers' layer: no controller imports another
// (what two of them share moves down, names and annotations into api/,
// helpers into a library). Its test runs Check over every package of the
// module (go list), so a wrong import fails CI with the rule it breaks.
package layers

import (
	"fmt"
	"strings"
)

// Module is fke's module path.
const Module = "fke.dev/fke"

// Decision lists the pure decision packages: no API clients, no I/O.
var Decision = []string{"internal/autoscaler/decide"}

// clients are the import path prefixes of API clients, which decision code
// does not import.
var clients = []string{"k8s.io/client-go/", "sigs.k8s.io/controller-runtime", "net/http", "os/exec"}

// Violation is one import that breaks a rule.
type Violation struct {
	Package, Import, Rule string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s imports %s: %s", v.Package, v.Import, v.Rule)
}

// rel returns p relative to the module ("" for a path outside it).
func rel(p string) string {
	if p == Module {
		return "."
	}
	if r, ok := strings.CutPrefix(p, Module+"/"); ok {
		return r
	}
	return ""
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// controllerOf returns the controller a package belongs to
// (internal/controller/<name>), or "".
func controllerOf(p string) string {
	r, ok := strings.CutPrefix(p, "internal/controller/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(r, "/")
	return name
}

// top says whether p is of the last layer (manager, cli, commands, tests,
// benchmarks, tools), which may import any package below it.
func top(p string) bool {
	for _, d := range []string{"internal/manager", "internal/cli", "cmd", "test", "bench", "hack"} {
		if under(p, d) {
			return true
		}
	}
	return false
}

// Check returns the violations among the (non-test) imports of the package
// pkg; both are full import paths.
func Check(pkg string, imports []string) []Violation {
	p := rel(pkg)
	if p == "" {
		return nil
	}
	var out []Violation
	add := func(imp, rule string) { out = append(out, Violation{Package: p, Import: imp, Rule: rule}) }
	for _, full := range imports {
		if p != "" && isDecision(p) {
			for _, c := range clients {
				if strings.HasPrefix(full, c) {
					add(full, "decision code is pure: it takes objects and returns decisions, with no API client or I/O (pass what it needs in)")
				}
			}
		}
		i := rel(full)
		if i == "" {
			continue
		}
		switch {
		case under(i, "test") && !under(p, "test") && !under(p, "bench"):
			add(i, "only tests and benchmarks import the test helpers")
		case under(p, "api") && !under(i, "api"):
			add(i, "api/ is the bottom layer: it imports nothing of fke's outside api/")
		case isDecision(p) && !under(i, "api") && !isDecision(i) && !isLeafLibrary(i):
			add(i, "decision code imports only api/ and other decision code")
		case top(p):
			// manager, cli, commands: anything below; but the manager does not import the CLI.
			if under(p, "internal/manager") && under(i, "internal/cli") {
				add(i, "the manager does not import the CLI")
			}
		case controllerOf(p) != "":
			if c := controllerOf(i); c != "" && c != controllerOf(p) {
				add(i, "no controller imports another: move what both need down (names and annotations to api/, helpers to a library)")
			}
			if top(i) {
				add(i, "controllers do not import the manager or the CLI")
			}
		default: // libraries, runtimes, providers
			if controllerOf(i) != "" || top(i) {
				add(i, "libraries, runtimes and providers do not import controllers, the manager or the CLI")
			}
		}
	}
	return out
}

func isDecision(p string) bool {
	for _, d := range Decision {
		if under(p, d) {
			return true
		}
	}
	return false
}

// leafLibraries are the libraries decision code may use: they hold
// constants and pure helpers over API objects only.
var leafLibraries = []string{"internal/nodetemplate", "internal/nodeutil", "internal/autoscaler/provreq/v1"}

func isLeafLibrary(p string) bool {
	for _, d := range leafLibraries {
		if under(p, d) {
			return true
		}
	}
	return false
}
