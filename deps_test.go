package pcrunner_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	// The chosen set, imported here so that go.mod and go.sum stay complete
	// while packages adopt them one by one.
	_ "github.com/coder/websocket"
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "github.com/spf13/pflag"
	_ "github.com/stretchr/testify/require"
	_ "go.uber.org/goleak"
	_ "golang.org/x/sys/unix"
)

// allowedModules is the dependency set the project chose (DEVELOPERS.md);
// anything else must be named by an issue and argued for in a note.
var allowedModules = map[string]string{
	"golang.org/x/sys":                         "raw syscalls: statx, openat, flock, renameat2",
	"github.com/coder/websocket":               "the PRP WebSocket transport",
	"github.com/spf13/pflag":                   "GNU-style flags the server passes",
	"github.com/fsnotify/fsnotify":             "the stdin and event queue watches (design card)",
	"github.com/stretchr/testify":              "test assertions",
	"go.uber.org/goleak":                       "goroutine leak checks in tests",
	"github.com/santhosh-tekuri/jsonschema/v6": "tool catalog schemas in runnerd (issue 10); emitted events against the reference schemas in tests (issue 5)",
	"github.com/dlclark/regexp2":               "ECMAScript-mode patterns for catalog schemas (issue 10, tools.md §1)",
	"golang.org/x/mod":                         "test only: this file reads go.mod",
	"github.com/modelcontextprotocol/go-sdk":   "test only: the real MCP client of test/fakeacp and the bridge tests (issue 10)",
	"golang.org/x/text":                        "indirect: required by jsonschema's tests only",
	"go.etcd.io/bbolt":                         "runnerd's durable store (issue 23): pure Go, keeps the static build, +0.25 MiB binary and +0.6 MiB RSS against SQLite's +3.8 and +1.9",
	"github.com/pmezard/go-difflib":            "the line matcher of runnerd's unified workspace diffs (issue 26): already pinned through testify, small, dependency-free, stable since 2016",
}

// indirectOK lists modules that may appear only as indirect requirements of
// the allowed set (testify's own dependencies).
var indirectOK = map[string]bool{
	"github.com/davecgh/go-spew":      true,
	"github.com/pmezard/go-difflib":   true,
	"gopkg.in/yaml.v3":                true,
	"go.yaml.in/yaml/v3":              true,
	"github.com/kr/pretty":            true,
	"github.com/kr/text":              true,
	"github.com/rogpeppe/go-internal": true,
	"gopkg.in/check.v1":               true,
	"github.com/stretchr/objx":        true,
	"github.com/google/go-cmp":        true,
	"github.com/dlclark/regexp2":      true,
	// go-sdk's own dependencies (test only).
	"github.com/google/jsonschema-go":    true,
	"github.com/segmentio/asm":           true,
	"github.com/segmentio/encoding":      true,
	"github.com/yosida95/uritemplate/v3": true,
	"golang.org/x/oauth2":                true,
	"golang.org/x/sync":                  true,
	"golang.org/x/time":                  true,
}

func TestDependencySetIsPinned(t *testing.T) {
	data, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Require {
		if _, ok := allowedModules[r.Mod.Path]; ok {
			continue
		}
		if r.Indirect && indirectOK[r.Mod.Path] {
			continue
		}
		t.Errorf("go.mod requires %s, which is not in the chosen dependency set (deps_test.go)", r.Mod.Path)
	}
}

// TestProductionBinariesImportNoTestModules checks that the shipped binaries
// link only the runtime dependency set, not test-only modules.
func TestProductionBinariesImportNoTestModules(t *testing.T) {
	// jsonschema and regexp2 are runtime dependencies: runnerd validates tool catalogs.
	testOnly := []string{"github.com/stretchr/testify", "go.uber.org/goleak", "golang.org/x/mod",
		"github.com/modelcontextprotocol/go-sdk"}
	for _, name := range cmdNames(t) {
		out, err := exec.Command("go", "list", "-deps", "./cmd/"+name).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", name, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, bad := range testOnly {
				if strings.HasPrefix(dep, bad) {
					t.Errorf("cmd/%s links test-only package %s", name, dep)
				}
			}
			// Our own test-support packages (internal/testutil/..., any
			// xxxtest package such as acpx/acpxtest) serve tests only.
			if own := strings.TrimPrefix(dep, "github.com/pcrunner/pcrunner/"); own != dep &&
				(strings.HasPrefix(own, "internal/testutil") || strings.HasSuffix(own, "test")) {
				t.Errorf("cmd/%s links test-support package %s", name, dep)
			}
		}
	}
}

// TestRunnerdLinksNoController checks that runnerd, the runner half of PRP,
// links neither the controller half (internal/prp/control, for prpctl and
// tests) nor its test support (internal/prp/prptest): the sandbox binary
// carries no code that only a control plane or a test runs.
func TestRunnerdLinksNoController(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./cmd/runnerd").CombinedOutput()
	if err != nil {
		t.Fatalf("go list runnerd: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/pcrunner/pcrunner/internal/prp/control",
		"github.com/pcrunner/pcrunner/internal/prp/prptest",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range forbidden {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("cmd/runnerd links %s", dep)
			}
		}
	}
}

// TestBinariesAreStatic builds every cmd/ the way the Makefile does and
// checks that none needs a dynamic loader or shared library: the binaries
// are dropped into arbitrary sandbox images.
func TestBinariesAreStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	dir := t.TempDir()
	for _, name := range cmdNames(t) {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, b)
		}
		f, err := elf.Open(out)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a program interpreter: not static", name)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s links shared libraries %v", name, libs)
		}
		f.Close()
	}
}

func cmdNames(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("cmd")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join("cmd", e.Name(), "main.go")); err == nil {
				names = append(names, e.Name())
			}
		}
	}
	if len(names) == 0 {
		t.Skip("no binaries under cmd/ yet")
	}
	return names
}
