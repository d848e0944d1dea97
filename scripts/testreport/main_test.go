package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestReportKeepsTerseOutputAndListsSkips(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"output","Package":"q","Output":"PASS\n"}`,
		`{"Action":"output","Package":"q","Output":"ok  \tq\t0.01s\n"}`, // q ends after p: printed then
		`{"Action":"output","Package":"p","Output":"    p_test.go:1: before any test\n"}`,
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:3: chatty\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"=== RUN   TestB\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: no node on PATH\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"=== RUN   TestC\n"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:1: boom\n"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"--- FAIL: TestC (0.01s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestC"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t0.02s\n"}`,
		`{"Action":"fail","Package":"p"}`,
		`{"Action":"pass","Package":"q"}`,
		`not json`,
	}, "\n")
	var out strings.Builder
	res := report(strings.NewReader(in), &out)
	skips := res.skips
	assert.Equal(t, "    p_test.go:1: before any test\n    c_test.go:1: boom\n--- FAIL: TestC (0.01s)\nFAIL\nFAIL\tp\t0.02s\nok  \tq\t0.01s\nnot json\n", out.String())
	assert.Equal(t, []string{"p TestB: b_test.go:9: no node on PATH"}, skips)
}

// Top-level tests are counted by outcome; a subtest's outcome is its
// parent's, so a table test counts once.
func TestReportCountsTopLevelTests(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"pass","Package":"p","Test":"TestB/one"}`,
		`{"Action":"fail","Package":"p","Test":"TestB/two"}`,
		`{"Action":"fail","Package":"p","Test":"TestB"}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`{"Action":"skip","Package":"p","Test":"TestD/x"}`,
		`{"Action":"pass","Package":"p","Test":"TestD"}`,
		`{"Action":"fail","Package":"p"}`,
		`{"Action":"pass","Package":"q","Test":"TestE"}`,
		`{"Action":"fail","Package":"q"}`, // goleak in TestMain: one more
	}, "\n")
	res := report(strings.NewReader(in), &strings.Builder{})
	assert.Equal(t, [3]int{3, 2, 1}, [3]int{res.passed, res.failed, res.skipped})
}
