// Command testreport turns `go test -json` on stdin into go test's usual
// terse output on stdout (package ok/FAIL lines, and the output of failing
// tests only), then prints one line per skipped test with its reason, so a
// skip is never silent. A small reader over test2json instead of gotestsum:
// no new dependency (deps_test.go pins the module set). It exits 0 (1 only
// if it cannot write -skips or -counts); the caller keeps go test's own exit
// status. -counts FILE writes "PASSED FAILED SKIPPED" (top-level tests; a
// subtest's result is its parent's), so a caller can sum several go test
// runs into one summary line.
//
// Usage: go test -json ./... | go run ./scripts/testreport [-skips FILE] [-counts FILE]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one test2json record (go doc test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output / build-fail
	Test       string
	Output     string
}

// maxLine bounds one JSON record: a test's output line can be long
// (a dumped frame), and bufio.Scanner's 64 KiB default would stop there.
const maxLine = 16 << 20

func main() {
	skipFile := flag.String("skips", "", "write the skipped tests to this file instead of printing them last")
	countFile := flag.String("counts", "", "write \"PASSED FAILED SKIPPED\" (top-level tests) to this file")
	flag.Parse()
	res := report(os.Stdin, os.Stdout)
	if *countFile != "" {
		line := fmt.Sprintf("%d %d %d\n", res.passed, res.failed, res.skipped)
		if err := os.WriteFile(*countFile, []byte(line), 0o600); err != nil {
			fmt.Fprintf(os.Stderr, "testreport: write counts: %v\n", err)
			os.Exit(1)
		}
	}
	skips := res.skips
	var b strings.Builder
	for _, s := range skips {
		b.WriteString("SKIP " + s + "\n")
	}
	if *skipFile != "" {
		if err := os.WriteFile(*skipFile, []byte(b.String()), 0o600); err != nil {
			fmt.Fprintf(os.Stderr, "testreport: write skips: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(skips) > 0 {
		fmt.Printf("\n%d tests skipped:\n%s", len(skips), b.String())
	}
}

// result is what report found: the skipped tests ("pkg Test: reason",
// sorted, subtests included) and the count of top-level tests by outcome
// (a package that failed without a failed test counts as one failure).
type result struct {
	skips                   []string
	passed, failed, skipped int
}

// report renders r to w and returns what it found.
func report(r io.Reader, w io.Writer) result {
	var res result
	pkgFailed := map[string]bool{} // packages with a failed test
	type key struct{ pkg, test string }
	buf := map[key][]string{}
	// Packages run in parallel and their events interleave; like go test,
	// print each package's lines together, when it ends.
	pkgOut := map[string]*strings.Builder{}
	out := func(pkg, s string) {
		b := pkgOut[pkg]
		if b == nil {
			b = &strings.Builder{}
			pkgOut[pkg] = b
		}
		b.WriteString(s)
	}
	var skips []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			fmt.Fprintf(w, "%s\n", line) // not ours: pass it through
			continue
		}
		k := key{ev.Package, ev.Test}
		switch {
		case ev.Action == "build-output":
			fmt.Fprint(w, ev.Output)
		case ev.Test == "" && ev.Action == "output":
			// Package-level lines: ok/FAIL/? lines, and output outside any
			// test (a panic, goleak). "PASS" is what -v adds.
			if ev.Output != "PASS\n" {
				out(ev.Package, ev.Output)
			}
		case ev.Test == "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
			if ev.Action == "fail" && !pkgFailed[ev.Package] {
				// The package failed outside any test (a build failure, a
				// panic or leak in TestMain): that counts as one failure.
				res.failed++
			}
			if b := pkgOut[ev.Package]; b != nil {
				fmt.Fprint(w, b.String())
				delete(pkgOut, ev.Package)
			}
		case ev.Test == "":
		case ev.Action == "output":
			buf[k] = append(buf[k], ev.Output)
		case ev.Action == "fail":
			if !strings.Contains(ev.Test, "/") {
				res.failed++
			}
			pkgFailed[ev.Package] = true
			for _, o := range buf[k] {
				if !isFrame(o) {
					out(ev.Package, o)
				}
			}
			delete(buf, k)
		case ev.Action == "skip":
			if !strings.Contains(ev.Test, "/") {
				res.skipped++
			}
			skips = append(skips, fmt.Sprintf("%s %s: %s", ev.Package, ev.Test, reason(buf[k])))
			delete(buf, k)
		case ev.Action == "pass":
			if !strings.Contains(ev.Test, "/") {
				res.passed++
			}
			delete(buf, k)
		}
	}
	pkgs := make([]string, 0, len(pkgOut))
	for p := range pkgOut {
		pkgs = append(pkgs, p) // cut short (go test killed): print what came
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		fmt.Fprint(w, pkgOut[p].String())
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(w, "testreport: read go test output: %v\n", err)
	}
	sort.Strings(skips)
	res.skips = skips
	return res
}

// isFrame reports the lines -v adds around a test (=== RUN and the like).
func isFrame(s string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// reason joins what a skipped test logged (t.Skip's message) into one line.
func reason(out []string) string {
	var parts []string
	for _, o := range out {
		o = strings.TrimSpace(o)
		if o == "" || isFrame(o) || strings.HasPrefix(o, "--- SKIP") {
			continue
		}
		parts = append(parts, o)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}
