package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcrunner/pcrunner/internal/catalog"
	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
	"github.com/pcrunner/pcrunner/internal/prp/prptest"
	"github.com/pcrunner/pcrunner/internal/testutil/syncbuf"
)

// Bounds of one run. The bound a run is judged by comes from its own
// flags and faults (boundOf); the driver's waits end a little after it so
// that a run that breaks it is still recorded, never hung.
const (
	// baseBound is a faultless run on a loaded two-core machine: start,
	// prepare, open, the scenario's turns, the final turn, the stop.
	baseBound = 12 * time.Second
	// restartBound is what one more life of runnerd (or of the agent, or
	// of the connection) may add: startup, reconnect, reconciliation.
	restartBound = 4 * time.Second
	// driverSlack is how long past its bound the driver still waits.
	driverSlack = 8 * time.Second
	// leaseTTL is the core's lease for a lease-expiry run: the outage
	// outlasts it by outageExtra.
	leaseTTL    = 2 * time.Second
	outageExtra = 500 * time.Millisecond
	// halfOpenHold is how long the core stops reading before the drop.
	halfOpenHold = 400 * time.Millisecond
	// fullHold is how long the state filesystem stays full.
	fullHold = 400 * time.Millisecond
	// stateFSBytes is the size of an ENOSPC run's state filesystem.
	stateFSBytes = 32 << 20
	// rekeyFrameLimit is the core's secure-channel frame bound in a rekey
	// run: a rekey every few frames.
	rekeyFrameLimit = 16
	// maxJitter bounds the seeded pause before a fault strikes.
	maxJitter = 250 * time.Millisecond
	// maxLives bounds runnerd's restarts in one run.
	maxLives = 8
	// goneWait bounds the wait for a run's processes to end after
	// runnerd's orderly stop; goneTick is the pause between looks.
	goneWait = 15 * time.Second
	goneTick = 20 * time.Millisecond
	// stderrLines is how much of runnerd's stderr a flagged run shows.
	stderrLines = 25
	// streamChunks is the streaming scenario's message chunks.
	streamChunks = 300
)

var chaosIdentity = prp.Identity{
	RunnerInstanceID: "runner_chaos", EnvironmentLeaseID: "env_chaos", RunID: "run_chaos",
	NormalizedSessionID: "session_chaos", TurnID: "turn_chaos", ItemID: "item_chaos",
}

const (
	chaosVersion = "0.0.0-chaos"
	chaosDigest  = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// binaries are the real programs a wave drives, built once per wave.
type binaries struct{ runnerd, pcwrap, fakeacp string }

// outcome is one driven run: its record, the rules it breaks, the cells it
// hit, and runnerd's stderr when it is flagged.
type outcome struct {
	rec     Record
	flagged []string
	hit     []Cell
	skipped string
	stderr  string
}

// runDriver drives one plan. Its fields below mu are shared with the
// supervisor goroutine.
type runDriver struct {
	plan     Plan
	bins     binaries
	rng      *rand.Rand
	root     string // the run's directory: state, workspace, filler
	state    string
	pcore    *prptest.Core
	core     *control.Core
	url      string // the connect URL of the first identity's run route
	deadline time.Time
	ctx      context.Context

	// mu guards every field below but superDone: the supervisor
	// goroutine and the driver share them.
	mu        sync.Mutex
	proc      *exec.Cmd
	lives     int
	stopping  bool
	suspended bool
	killArmed string
	killFired bool
	exits     []Exit
	stderr    *syncbuf.Buffer
	agentPID  int
	errs      []string
	hits      []Cell
	queued    []queuedCommand
	superDone chan struct{}
}

// boundOf is the run's bound from its flags: the base, plus per fault the
// lives it adds and the waits its flags set (the lease's TTL and outage,
// the half-open hold, the full filesystem's hold).
func boundOf(p Plan) time.Duration {
	b := baseBound
	for _, f := range p.Faults {
		b += restartBound
		switch f.Kind {
		case FaultLease:
			b += leaseTTL + outageExtra + restartBound
		case FaultHalfOpen:
			b += halfOpenHold
		case FaultENOSPC:
			b += fullHold
		}
	}
	if p.Scenario == ScenarioSuspend {
		b += restartBound
	}
	return b
}

// drive runs plan p and judges it; t owns the run's core (its cleanup
// closes whatever the run left open).
func drive(t testing.TB, bins binaries, p Plan) outcome {
	start := time.Now()
	d := &runDriver{plan: p, bins: bins, rng: rand.New(rand.NewPCG(p.Seed, p.Seed>>1|1)), superDone: make(chan struct{})}
	bound := boundOf(p)
	d.deadline = start.Add(bound + driverSlack)
	var cancel context.CancelFunc
	d.ctx, cancel = context.WithDeadline(context.Background(), d.deadline)
	defer cancel()

	root, err := os.MkdirTemp("", "pcrunner-chaos-")
	if err != nil {
		return outcome{skipped: "temp dir: " + err.Error()}
	}
	d.root = root
	defer os.RemoveAll(root)
	d.state = filepath.Join(root, "state")
	if p.Has(FaultENOSPC) {
		fs := filepath.Join(root, "fs")
		if err := os.Mkdir(fs, 0o700); err != nil {
			return outcome{skipped: err.Error()}
		}
		if err := unix.Mount("tmpfs", fs, "tmpfs", 0, "size="+strconv.Itoa(stateFSBytes)+",mode=0700"); err != nil {
			return outcome{skipped: "ENOSPC needs root to mount a small tmpfs: " + err.Error()}
		}
		defer func() { _ = unix.Unmount(fs, unix.MNT_DETACH) }()
		d.state = filepath.Join(fs, "state")
	}

	cfg := control.Config{Identity: chaosIdentity, RunnerVersion: chaosVersion, RunnerDigest: chaosDigest}
	if p.Has(FaultLease) {
		cfg.LeaseTTL = leaseTTL
	}
	if p.Has(FaultRekey) {
		cfg.FrameLimit = rekeyFrameLimit
	}
	d.pcore = prptest.NewCore(t, cfg)
	d.pcore.WaitBound = restartBound
	d.core = d.pcore.Core
	defer d.pcore.CloseAll()
	d.url = d.pcore.ServeLoopback()
	for _, f := range p.Faults {
		if f.Kind == FaultRunnerdKill {
			d.killArmed = f.At
		}
	}

	if err := d.startLife(); err != nil {
		return outcome{skipped: "start runnerd: " + err.Error()}
	}
	go d.supervise()
	final := d.scenario()
	d.stop()
	leftovers := d.leftovers()

	rec := Record{Plan: p, Duration: time.Since(start), Bound: bound, Leftovers: leftovers, FinalTurn: final}
	d.collect(&rec)
	d.mu.Lock()
	rec.Exits = append(rec.Exits, d.exits...)
	rec.Errors = append(rec.Errors, d.errs...)
	hits := append([]Cell(nil), d.hits...)
	if d.killFired {
		for _, f := range p.Faults {
			if f.Kind == FaultRunnerdKill {
				hits = append(hits, Cell{Scenario: p.Scenario, Step: f.At, Fault: f.Kind})
			}
		}
	}
	stderr := d.stderr.String()
	d.mu.Unlock()
	out := outcome{rec: rec, flagged: Judge(&rec), hit: hits}
	if len(out.flagged) > 0 || os.Getenv("CHAOS_STDERR") == "1" {
		out.stderr = tail(stderr, stderrLines)
		if os.Getenv("CHAOS_STDERR") == "1" {
			out.stderr = stderr
		}
	}
	return out
}

// fail records a driver failure; the scenario stops at the first.
func (d *runDriver) fail(format string, args ...any) {
	d.mu.Lock()
	d.errs = append(d.errs, fmt.Sprintf(format, args...))
	d.mu.Unlock()
}

// argsFor is runnerd's command line as identity id: its flags and its
// run's connect route (each run dials its own, prp.md §1.1).
func (d *runDriver) argsFor(id prp.Identity) []string {
	url := strings.TrimSuffix(d.url, prp.ConnectPath(chaosIdentity.RunID)) + prp.ConnectPath(id.RunID)
	return []string{
		"--state-dir", d.state, "--connect-url", url, "--pcwrap-path", d.bins.pcwrap,
		"--lifecycle-mode", "warm", "--idle-timeout-ms", "600000",
		"--runner-id", id.RunnerInstanceID, "--environment-lease-id", id.EnvironmentLeaseID,
		"--run-id", id.RunID, "--session-id", id.NormalizedSessionID,
		"--turn-id", id.TurnID, "--item-id", id.ItemID,
		"--runner-version", chaosVersion, "--runner-digest", chaosDigest,
		"--reconnect-delay-ms", "5",
	}
}

// startLife launches runnerd with a fresh ticket, as the identity the core
// issues it for (after settling forward a warm rotation whose receipt the
// core acknowledged, as the server does, prp.md §9.5); the first life
// carries the kill point, if the plan has one. d.mu must not be held.
func (d *runDriver) startLife() error {
	if _, err := d.pcore.TrySettleWarmForward(); err != nil {
		return err
	}
	ticket, err := d.core.MintTicket()
	if err != nil {
		return err
	}
	cmd := exec.Command(d.bins.runnerd, d.argsFor(d.core.Snapshot().Identity)...)
	cmd.Env = append(os.Environ(), "PAPERCLIP_RUNNER_BOOTSTRAP_TICKET="+ticket)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lives == 0 && d.killArmed != "" {
		cmd.Env = append(cmd.Env, "PCRUNNER_TESTHOOK_KILL_AFTER="+d.killArmed)
	}
	if d.stderr == nil {
		d.stderr = &syncbuf.Buffer{}
	}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	d.proc = cmd
	d.lives++
	return nil
}

// supervise waits for each life of runnerd, records how it ended and
// starts the next one unless the driver is stopping it.
func (d *runDriver) supervise() {
	defer close(d.superDone)
	for {
		d.mu.Lock()
		cmd, life := d.proc, d.lives
		d.mu.Unlock()
		_ = cmd.Wait()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		e := Exit{Code: cmd.ProcessState.ExitCode()}
		if ws.Signaled() {
			e.Signal = ws.Signal().String()
		}
		d.mu.Lock()
		switch {
		case ws.Signaled() && ws.Signal() == syscall.SIGKILL && life == 1 && d.killArmed != "":
			e.Expected, d.killFired = "kill point "+d.killArmed, true
		case e.Code == 0 && !ws.Signaled() && d.stopping:
			e.Expected = "orderly stop"
		case e.Code == 0 && !ws.Signaled() && d.suspended:
			e.Expected = "suspended"
		case e.Code != 0 && d.plan.Has(FaultLease) && strings.Contains(d.stderr.String(), "lease_expired"):
			e.Expected = "lease expired during the outage"
		}
		d.exits = append(d.exits, e)
		stop := d.stopping || d.lives >= maxLives
		if d.lives >= maxLives && !d.stopping {
			d.errs = append(d.errs, fmt.Sprintf("runnerd ended %d times", maxLives))
		}
		d.mu.Unlock()
		if stop || time.Now().After(d.deadline) {
			return
		}
		if err := d.startLife(); err != nil {
			d.fail("restart runnerd: %v", err)
			return
		}
	}
}

// stop ends the run: an orderly stop (SIGTERM stops the agents too), then
// waits for the supervisor.
func (d *runDriver) stop() {
	d.mu.Lock()
	d.stopping = true
	cmd := d.proc
	d.mu.Unlock()
	if cmd != nil && cmd.ProcessState == nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-d.superDone:
	case <-time.After(goneWait):
		_ = cmd.Process.Kill()
		d.fail("runnerd did not stop within %v of SIGTERM", goneWait)
		<-d.superDone
	}
}

// leftovers lists the run's processes (their command line or working
// directory lies in the run's directory) still alive a while after the
// stop, and kills them.
func (d *runDriver) leftovers() []string {
	var left []int
	for end := time.Now().Add(goneWait); ; {
		left = processesUnder(d.root)
		if len(left) == 0 || time.Now().After(end) {
			break
		}
		time.Sleep(goneTick)
	}
	var out []string
	for _, pid := range left {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return out
}

// processesUnder returns the live (not zombie) processes whose command
// line or working directory names dir.
func processesUnder(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if strings.Contains(string(cmdline), dir) || strings.HasPrefix(cwd, dir) {
			out = append(out, pid)
		}
	}
	return out
}

// collect fills the record from the core: events, results, tool answers.
func (d *runDriver) collect(rec *Record) {
	s := d.core.Snapshot()
	text := ""
	type journal struct {
		events  []json.RawMessage
		results map[string]json.RawMessage
	}
	var journals []journal
	for _, ep := range s.Epochs {
		journals = append(journals, journal{ep.Events, ep.Results})
	}
	journals = append(journals, journal{s.Events, s.Results})
	for epoch, j := range journals {
		d.collectEvents(rec, epoch, j.events, &text)
	}
	d.mu.Lock()
	queued := append([]queuedCommand(nil), d.queuedLocked()...)
	d.mu.Unlock()
	rec.ToolAnswers = map[string]int{}
	for _, q := range queued {
		var raw json.RawMessage
		for _, j := range journals {
			if r := j.results[q.id]; r != nil {
				raw = r
			}
		}
		if raw == nil {
			continue
		}
		var res prp.CommandResultPayload
		if err := json.Unmarshal(raw, &res); err != nil {
			rec.Errors = append(rec.Errors, "decode result: "+err.Error())
			continue
		}
		var body struct{ Code string }
		_ = json.Unmarshal(res.Result, &body)
		rec.Results = append(rec.Results, Result{ID: q.id, Type: q.typ, Status: res.Status, Code: body.Code, CallID: q.callID})
		if q.callID != "" {
			rec.ToolAnswers[q.callID] = strings.Count(text, toolAnswer(q.callID))
		}
	}
}

// collectEvents adds one identity's committed events to the record and
// their message text to text.
func (d *runDriver) collectEvents(rec *Record, epoch int, raws []json.RawMessage, text *string) {
	for _, raw := range raws {
		var env struct {
			Payload struct {
				SourceSeq     uint64 `json:"sourceSeq"`
				SourceEventID string `json:"sourceEventId"`
				EventType     string `json:"eventType"`
				Payload       struct {
					TurnTerminalState string `json:"turnTerminalState"`
					Text              string `json:"text"`
					SemanticTool      struct {
						CallID string `json:"callId"`
					} `json:"semantic_tool"`
				} `json:"payload"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(raw, &env); err != nil {
			rec.Errors = append(rec.Errors, "decode event: "+err.Error())
			continue
		}
		p := env.Payload
		rec.Events = append(rec.Events, Event{Epoch: epoch, Seq: p.SourceSeq, ID: p.SourceEventID, Type: p.EventType,
			Outcome: p.Payload.TurnTerminalState, CallID: p.Payload.SemanticTool.CallID})
		if p.EventType == prp.EventItemDelta {
			*text += p.Payload.Text
		}
	}
}

// toolAnswer is the text fakeacp says when the answer to callID reaches it.
func toolAnswer(callID string) string { return `{"id":"c-` + callID + `"}` }

// commentCatalog authorizes issue.comment, the tool scenario's tool.
func commentCatalog() map[string]any {
	op := catalog.Operation{OperationID: "issue.comment", Version: 1, Description: "Comment on the task.",
		InputSchema:    json.RawMessage(`{"type":"object","required":["body"],"properties":{"body":{"type":"string"}}}`),
		ResponseSchema: json.RawMessage(`{"type":"object"}`)}
	return map[string]any{"schema": catalog.Schema, "schemaVersion": 1,
		"catalogDigest": catalog.Digest([]catalog.Operation{op}), "operations": []catalog.Operation{op}}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
