package chaos

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/testutil/testbin"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(testbin.Exit))
}

// The wave's switches (environment, so that go test ./... runs no wave):
//
//	PCRUNNER_CHAOS_WAVE=1   run TestWave at all
//	CHAOS_SEEDS="a b c"     wave seeds (words); the runs are split among them
//	CHAOS_N=90              runs in all (at least one per cell and seed)
//	CHAOS_PAR=2             runs at once
//	CHAOS_PLAN=<plan>       replay one plan (Plan.String) instead
//	CHAOS_COUNTS=<file>     write "passed failed skipped" there
//	CHAOS_STDERR=1          print runnerd's whole stderr for every run
const (
	defaultWaveRuns = 90
	defaultPar      = 2
	defaultSeed     = "ci"
)

// replayCommand is the one command that replays plan p.
func replayCommand(p Plan) string {
	return fmt.Sprintf("PCRUNNER_CHAOS_WAVE=1 CHAOS_PLAN='%s' go test -count=1 -run '^TestWave$' -v ./test/chaos", p)
}

// TestWave runs one chaos wave and fails when a run breaks a rule or a
// cell of the coverage matrix stays empty.
func TestWave(t *testing.T) {
	if os.Getenv("PCRUNNER_CHAOS_WAVE") != "1" {
		t.Skip("the chaos wave runs only with PCRUNNER_CHAOS_WAVE=1 (scripts/test runs it after go test; make chaos runs a long one)")
	}
	var plans []Plan
	replay := os.Getenv("CHAOS_PLAN")
	if replay != "" {
		p, err := ParsePlan(replay)
		if err != nil {
			t.Fatal(err)
		}
		plans = []Plan{p}
	} else {
		seeds := strings.Fields(os.Getenv("CHAOS_SEEDS"))
		if len(seeds) == 0 {
			seeds = []string{defaultSeed}
		}
		n := envInt("CHAOS_N", defaultWaveRuns)
		per := max((n+len(seeds)-1)/len(seeds), len(Cells()))
		for _, s := range seeds {
			plans = append(plans, Wave(SeedOf(s), per)...)
		}
		t.Logf("wave: seeds %v, %d runs (%d per seed), %d at once, %d cells", seeds, len(plans), per, envInt("CHAOS_PAR", defaultPar), len(Cells()))
	}
	bins := binaries{
		runnerd: testbin.Path(t, "runnerd", testbin.HooksTag),
		pcwrap:  testbin.Path(t, "pcwrap"),
		fakeacp: testbin.Build(t, "test/fakeacp"),
	}

	began := time.Now()
	outs := make([]outcome, len(plans))
	next := make(chan int)
	var wg sync.WaitGroup
	var printMu sync.Mutex // guards the wave's output lines (one run's lines together)
	for range max(1, envInt("CHAOS_PAR", defaultPar)) {
		wg.Go(func() {
			for i := range next {
				o := drive(t, bins, plans[i])
				outs[i] = o
				printMu.Lock()
				report(i, len(plans), plans[i], o)
				printMu.Unlock()
			}
		})
	}
	for i := range plans {
		next <- i
	}
	close(next)
	wg.Wait()
	wall := time.Since(began)

	passed, failed, skipped := summarize(outs, replay == "", wall)
	if path := os.Getenv("CHAOS_COUNTS"); path != "" {
		if err := os.WriteFile(path, fmt.Appendf(nil, "%d %d %d\n", passed, failed, skipped), 0o600); err != nil {
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Errorf("%d runs need a person (each printed with its replay command above)", failed)
	}
	fmt.Printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped)
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// report prints one run's line, and for a flagged run why, its replay
// command and runnerd's last stderr lines.
func report(i, n int, p Plan, o outcome) {
	switch {
	case o.skipped != "":
		fmt.Printf("run %d/%d SKIP %s: %s\n", i+1, n, p, o.skipped)
	case len(o.flagged) > 0:
		fmt.Printf("run %d/%d FLAGGED %s (%v)\n", i+1, n, p, o.rec.Duration.Round(time.Millisecond))
		for _, f := range o.flagged {
			fmt.Printf("    %s\n", f)
		}
		fmt.Printf("    replay: %s\n", replayCommand(p))
		fmt.Printf("    results: %s\n", resultsLine(o.rec.Results))
		fmt.Printf("    events: %s\n", eventsLine(o.rec.Events))
		fmt.Printf("    runnerd stderr (last lines):\n%s\n", indent(o.stderr))
	default:
		fmt.Printf("run %d/%d ok %s (%v)\n", i+1, n, p, o.rec.Duration.Round(time.Millisecond))
		if o.stderr != "" {
			fmt.Printf("    runnerd stderr (last lines):\n%s\n", indent(o.stderr))
		}
	}
}

// resultsLine is the run's command results, one word each.
func resultsLine(rs []Result) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Type + "=" + r.Status
		if r.Code != "" {
			out[i] += "/" + r.Code
		}
	}
	return strings.Join(out, " ")
}

// eventsLine is the run's committed event types, runner.* and
// item.delta left out.
func eventsLine(evs []Event) string {
	var out []string
	for _, e := range evs {
		if !strings.HasPrefix(e.Type, "runner.") && e.Type != "item.delta" {
			out = append(out, e.Type)
		}
	}
	return strings.Join(out, " ")
}

func indent(s string) string {
	return "      " + strings.ReplaceAll(s, "\n", "\n      ")
}

// summarize prints the per-fault counts, the coverage matrix, the run
// times and the wall time, and returns the counts. With coverage, an empty
// cell counts as one failure.
func summarize(outs []outcome, coverage bool, wall time.Duration) (passed, failed, skipped int) {
	type tally struct{ runs, flagged, skipped int }
	perFault := map[FaultKind]*tally{}
	for _, k := range FaultKinds {
		perFault[k] = &tally{}
	}
	hits := map[Cell]int{}
	var times []time.Duration
	for _, o := range outs {
		switch {
		case o.skipped != "":
			skipped++
		case len(o.flagged) > 0:
			failed++
		default:
			passed++
		}
		for _, f := range o.rec.Plan.Faults {
			t := perFault[f.Kind]
			t.runs++
			if o.skipped != "" {
				t.skipped++
			} else if len(o.flagged) > 0 {
				t.flagged++
			}
		}
		for _, c := range o.hit {
			hits[c]++
		}
		if o.skipped == "" {
			times = append(times, o.rec.Duration)
		}
	}
	fmt.Println("== per fault: runs, flagged, skipped")
	for _, k := range FaultKinds {
		t := perFault[k]
		fmt.Printf("  %-14s %5d %5d %5d\n", k, t.runs, t.flagged, t.skipped)
	}
	fmt.Println("== coverage: scenario × durable step (fault point) × fault: hits")
	empty := 0
	for _, c := range Cells() {
		mark := ""
		if hits[c] == 0 {
			mark, empty = "  EMPTY", empty+1
		}
		fmt.Printf("  %-10s %-26s %-13s %4d%s\n", c.Scenario, c.Step, c.Fault, hits[c], mark)
	}
	// Cells random runs hit beyond the matrix (other fault points).
	extra := 0
	for c := range hits {
		if !slices.Contains(Cells(), c) {
			extra++
		}
	}
	fmt.Printf("  (%d further scenario × point × fault combinations hit by random runs)\n", extra)
	slices.Sort(times)
	if len(times) > 0 {
		fmt.Printf("== run time: p50 %v, p95 %v, max %v over %d runs; wall time %v\n",
			pct(times, 50), pct(times, 95), times[len(times)-1].Round(time.Millisecond), len(times), wall.Round(time.Second))
	}
	if coverage && empty > 0 {
		fmt.Printf("== %d cells empty: the wave fails\n", empty)
		failed += empty
	}
	return passed, failed, skipped
}

// pct is the p-th percentile of sorted durations.
func pct(sorted []time.Duration, p int) time.Duration {
	i := min(len(sorted)-1, (len(sorted)*p+99)/100-1)
	return sorted[max(i, 0)].Round(time.Millisecond)
}
