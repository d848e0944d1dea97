package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pcrunner/pcrunner/internal/prp"
	"github.com/pcrunner/pcrunner/internal/prp/control"
)

// queuedCommand is a command the driver queued; callID is set for a
// semantic_tool.result.
type queuedCommand struct{ id, typ, callID string }

func (d *runDriver) queuedLocked() []queuedCommand { return d.queued }

// queue queues a command and returns its id ("" after a failure, recorded).
func (d *runDriver) queue(typ string, payload any, callID string) string {
	b, err := json.Marshal(payload)
	if err != nil {
		d.fail("encode %s: %v", typ, err)
		return ""
	}
	cmd, err := d.core.QueueCommand(prp.Command{Type: typ, Payload: b})
	if cmd.CommandID == "" {
		d.fail("queue %s: %v", typ, err)
		return ""
	}
	d.mu.Lock()
	d.queued = append(d.queued, queuedCommand{id: cmd.CommandID, typ: typ, callID: callID})
	d.mu.Unlock()
	return cmd.CommandID
}

// wait waits, until the run's deadline, for cond over the core's state.
func (d *runDriver) wait(what string, cond func(s control.Snapshot) bool) bool {
	if err := d.core.Wait(d.ctx, cond); err != nil {
		d.fail("%s: not within the run's deadline", what)
		return false
	}
	return true
}

// result waits for a command's result.
func (d *runDriver) result(id, typ string) (prp.CommandResultPayload, bool) {
	var res prp.CommandResultPayload
	if id == "" || !d.wait("the result of "+typ, func(s control.Snapshot) bool { return s.Results[id] != nil }) {
		return res, false
	}
	if err := json.Unmarshal(d.core.Snapshot().Results[id], &res); err != nil {
		d.fail("decode the result of %s: %v", typ, err)
		return res, false
	}
	return res, true
}

// events decodes the committed events' types and payloads.
func events(s control.Snapshot) []rawEvent {
	out := make([]rawEvent, 0, len(s.Events))
	for _, raw := range s.Events {
		var env struct {
			Payload rawEvent `json:"payload"`
		}
		if json.Unmarshal(raw, &env) == nil {
			out = append(out, env.Payload)
		}
	}
	return out
}

type rawEvent struct {
	EventType string          `json:"eventType"`
	Payload   json.RawMessage `json:"payload"`
}

func count(s control.Snapshot, typ string) int {
	n := 0
	for _, e := range events(s) {
		if e.EventType == typ {
			n++
		}
	}
	return n
}

// strike injects the plan's faults at point (after a seeded pause); it
// records the cells it hit.
func (d *runDriver) strike(point string) {
	for _, f := range d.plan.Faults {
		if f.Kind == FaultRunnerdKill || f.At != point {
			continue
		}
		if point != PointClose && point != PointSuspend {
			// A close or a suspend stops the agent within milliseconds:
			// strike at once, or a kill finds nothing to kill.
			time.Sleep(time.Duration(d.rng.Int64N(int64(maxJitter))))
		}
		if d.inject(f.Kind) {
			d.mu.Lock()
			d.hits = append(d.hits, Cell{Scenario: d.plan.Scenario, Step: point, Fault: f.Kind})
			d.mu.Unlock()
		}
	}
}

// inject applies one fault now; false when it could not (no agent yet).
func (d *runDriver) inject(k FaultKind) bool {
	switch k {
	case FaultAgentKill, FaultPcwrapKill:
		d.mu.Lock()
		pid := d.agentPID
		d.mu.Unlock()
		if pid <= 0 {
			return false
		}
		if k == FaultPcwrapKill {
			if pid = parentOf(pid); pid <= 1 {
				return false
			}
		}
		return syscall.Kill(pid, syscall.SIGKILL) == nil
	case FaultDrop, FaultRedeliver:
		// A redelivery: the command just queued is in flight or being
		// executed; the drop makes the next welcome deliver it again.
		d.core.DropCurrent()
		return true
	case FaultHalfOpen:
		release := d.core.HoldReads()
		time.Sleep(halfOpenHold)
		d.core.DropCurrent()
		release()
		return true
	case FaultLease:
		d.mu.Lock()
		cmd := d.proc
		d.mu.Unlock()
		if cmd == nil || cmd.Process.Signal(syscall.SIGSTOP) != nil {
			return false
		}
		d.core.DropCurrent()
		time.Sleep(leaseTTL + outageExtra)
		_ = cmd.Process.Signal(syscall.SIGCONT)
		return true
	case FaultENOSPC:
		if err := fill(filepath.Dir(d.state)); err != nil {
			d.fail("fill the state filesystem: %v", err)
			return false
		}
		time.Sleep(fullHold)
		_ = os.Remove(filepath.Join(filepath.Dir(d.state), "filler"))
		return true
	case FaultRekey:
		return true // a core setting for the whole run
	}
	return false
}

// fill writes dir/filler until its filesystem is full.
func fill(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "filler"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	block := bytes.Repeat([]byte{'x'}, 256<<10)
	for range stateFSBytes / len(block) * 2 {
		if _, err := f.Write(block); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
	return errors.New("the filesystem never filled")
}

// parentOf reads a process's parent pid from /proc (0 when gone).
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// scenario drives the plan's scenario, then the final session.open and
// turn; it reports whether that final turn completed.
func (d *runDriver) scenario() bool {
	if d.plan.Has(FaultRekey) {
		d.strike(PointStart)
	}
	provider := map[string]any{"kind": "acpx", "agent": "claude", "command": d.bins.fakeacp,
		"args": []string{"--supports-load-session"}, "cwd": filepath.Join(d.root, "work")}
	if err := os.MkdirAll(filepath.Join(d.root, "work"), 0o700); err != nil {
		d.fail("workspace: %v", err)
		return false
	}
	prepare := map[string]any{"provider": provider}
	if d.plan.Scenario == ScenarioTool {
		provider["args"] = []string{"--supports-load-session", "--mcp-http"}
		prepare["authorizedTools"] = commentCatalog()
	}
	if !d.completed(prp.CommandRunPrepare, prepare) || !d.open() {
		return false
	}
	ok := true
	switch d.plan.Scenario {
	case ScenarioPlain:
		ok = d.turn("echo plain", PointTurn)
	case ScenarioStreaming:
		ok = d.turn("chunks "+strconv.Itoa(streamChunks), PointTurn)
	case ScenarioTool:
		ok = d.toolTurn()
	case ScenarioTwoTurns:
		ok = d.turn("echo one", PointTurn) && d.open() && d.turn("echo two", "")
	case ScenarioClose:
		ok = d.turn("echo before-close", PointTurn) && d.closeSession()
	case ScenarioSuspend:
		ok = d.turn("echo before-suspend", PointTurn) && d.suspend()
	case ScenarioWarm:
		ok = d.turn("echo before-attach", PointTurn) && d.attach(provider)
	}
	if !ok {
		return false
	}
	// The final turn. A kill of the agent (or pcwrap) that lands as the
	// session opens may still fail it, cleanly; then the next turn must
	// work (acp.md §5.1). The final session.close ends the agent through
	// the protocol: the orderly stop after it has no agent to wait for.
	if !d.open() {
		return false
	}
	if !d.turn("echo final", finalPoint) && !(d.agentMayDie() && d.open() && d.turn("echo final-again", "")) {
		return false
	}
	return d.completed(prp.CommandSessionClose, map[string]any{})
}

// finalPoint marks the final turn: it strikes nothing, and a kill of the
// agent may fail it once.
const finalPoint = "final"

// completed runs a command and wants it completed.
func (d *runDriver) completed(typ string, payload any) bool {
	id := d.queue(typ, payload, "")
	res, ok := d.result(id, typ)
	if ok && res.Status != "completed" {
		d.fail("%s: %s %s", typ, res.Status, res.Result)
		return false
	}
	return ok
}

// open opens (or resumes) the session and notes the agent's pid.
func (d *runDriver) open() bool {
	id := d.queue(prp.CommandSessionOpen, map[string]any{"reuse": "same_session"}, "")
	res, ok := d.result(id, prp.CommandSessionOpen)
	if !ok {
		return false
	}
	if res.Status != "completed" {
		d.fail("session.open: %s %s", res.Status, res.Result)
		return false
	}
	var body struct {
		ProcessID int `json:"processId"`
	}
	_ = json.Unmarshal(res.Result, &body)
	d.mu.Lock()
	d.agentPID = body.ProcessID
	d.mu.Unlock()
	return true
}

// turn starts a turn, strikes at point right after queueing it, and waits
// for its run.terminal. A turn the plan's faults may fail (its agent
// killed) may end failed; any other must complete.
func (d *runDriver) turn(text, point string) bool {
	before := count(d.core.Snapshot(), prp.EventRunTerminal)
	id := d.queue(prp.CommandTurnStart, map[string]any{"text": text}, "")
	if point != "" && point != finalPoint {
		d.strike(point)
	}
	res, ok := d.result(id, prp.CommandTurnStart)
	if !ok {
		return false
	}
	if res.Status != "completed" {
		// Not delivered (runnerd or the agent died before the prompt
		// reached it): the run goes on with the next step.
		if point == finalPoint || !d.mayFail() {
			d.fail("turn.start %q: %s %s", text, res.Status, res.Result)
			return false
		}
		return true
	}
	if point == finalPoint && d.agentMayDie() {
		return d.settledQuiet(before + 1)
	}
	// A kill of the agent may land after the turn it struck, failing the
	// next one instead: any turn but the final may fail then.
	return d.settled(before+1, d.agentMayDie())
}

// settledQuiet waits for the n-th run.terminal and reports whether it
// completed, recording nothing when it did not (the caller tries again).
func (d *runDriver) settledQuiet(n int) bool {
	if !d.wait("run.terminal "+strconv.Itoa(n), func(s control.Snapshot) bool { return count(s, prp.EventRunTerminal) >= n }) {
		return false
	}
	return d.lastTerminal() == "completed"
}

// lastTerminal is the newest run.terminal's turnTerminalState.
func (d *runDriver) lastTerminal() string {
	state := ""
	for _, e := range events(d.core.Snapshot()) {
		if e.EventType == prp.EventRunTerminal {
			var p struct {
				TurnTerminalState string `json:"turnTerminalState"`
			}
			_ = json.Unmarshal(e.Payload, &p)
			state = p.TurnTerminalState
		}
	}
	return state
}

// agentMayDie: the plan kills the agent or its pcwrap, fills the disk
// under pcwrap's output, or lets the lease expire (runnerd must exit for a
// fresh ticket and stops its agent on the way), so the struck turn may end
// failed or interrupted, cleanly, with its one run.terminal.
func (d *runDriver) agentMayDie() bool {
	return d.plan.Has(FaultAgentKill) || d.plan.Has(FaultPcwrapKill) || d.plan.Has(FaultENOSPC) || d.plan.Has(FaultLease)
}

// mayFail: the plan kills the agent (or its pcwrap, or runnerd before the
// prompt is delivered) or fills the disk under pcwrap's output, so the
// struck turn may fail, cleanly; no other fault may fail a turn.
func (d *runDriver) mayFail() bool {
	return d.plan.Has(FaultAgentKill) || d.plan.Has(FaultPcwrapKill) || d.plan.Has(FaultENOSPC) || d.plan.Has(FaultRunnerdKill)
}

// settled waits for the n-th run.terminal; a turn that may fail may end
// failed, any other must end completed.
func (d *runDriver) settled(n int, mayFail bool) bool {
	if !d.wait("run.terminal "+strconv.Itoa(n), func(s control.Snapshot) bool { return count(s, prp.EventRunTerminal) >= n }) {
		return false
	}
	state := d.lastTerminal()
	if state != "completed" && !mayFail {
		d.fail("a turn no fault touched ended %s", state)
		return false
	}
	return true
}

// toolTurn is the tool scenario's turn: the agent calls issue.comment
// (repeating the call when its first one breaks); the driver answers each
// new call with semantic_tool.result, striking right after queueing the
// first answer, until the turn ends.
func (d *runDriver) toolTurn() bool {
	before := count(d.core.Snapshot(), prp.EventRunTerminal)
	id := d.queue(prp.CommandTurnStart, map[string]any{"text": `mcp-call-retry issue.comment {"body":"chaos"}`}, "")
	d.strike(PointTurn)
	res, ok := d.result(id, prp.CommandTurnStart)
	if !ok {
		return false
	}
	if res.Status != "completed" {
		if !d.mayFail() {
			d.fail("turn.start: %s %s", res.Status, res.Result)
			return false
		}
		return true
	}
	answered := map[string]bool{}
	struck := false
	for {
		var pending map[string]any
		if !d.wait("the tool turn's next call or its end", func(s control.Snapshot) bool {
			if count(s, prp.EventRunTerminal) > before {
				return true
			}
			pending = unanswered(s, answered)
			return pending != nil
		}) {
			return false
		}
		if pending == nil {
			return d.settled(before+1, d.agentMayDie())
		}
		callID, _ := pending["callId"].(string)
		answered[callID] = true
		digest, _ := pending["content"].(map[string]any)["digest"]
		d.queue(prp.CommandSemanticToolResult, map[string]any{"callId": callID, "operationId": pending["operationId"],
			"inputDigest": digest, "result": map[string]any{"id": "c-" + callID}, "isError": false}, callID)
		if !struck {
			struck = true
			d.strike(PointTool)
		}
	}
}

// unanswered returns the semantic_tool part of the first committed
// semantic_tool.input not yet answered, or nil.
func unanswered(s control.Snapshot, answered map[string]bool) map[string]any {
	for _, e := range events(s) {
		if e.EventType != prp.EventSemanticToolInput {
			continue
		}
		var p struct {
			SemanticTool map[string]any `json:"semantic_tool"`
		}
		if json.Unmarshal(e.Payload, &p) != nil || p.SemanticTool == nil {
			continue
		}
		if id, _ := p.SemanticTool["callId"].(string); id != "" && !answered[id] {
			return p.SemanticTool
		}
	}
	return nil
}

// closeSession closes the session, striking right after queueing it.
func (d *runDriver) closeSession() bool {
	id := d.queue(prp.CommandSessionClose, map[string]any{}, "")
	d.strike(PointClose)
	res, ok := d.result(id, prp.CommandSessionClose)
	if ok && res.Status != "completed" {
		d.fail("session.close: %s %s", res.Status, res.Result)
		return false
	}
	return ok
}

// suspend suspends runnerd, striking right after queueing it; runnerd
// exits and the supervisor starts the next life, which resumes the run.
func (d *runDriver) suspend() bool {
	d.mu.Lock()
	d.suspended = true
	d.mu.Unlock()
	id := d.queue(prp.CommandRunnerSuspend, map[string]any{}, "")
	d.strike(PointSuspend)
	res, ok := d.result(id, prp.CommandRunnerSuspend)
	if !ok {
		return false
	}
	if res.Status != "completed" && !d.plan.Has(FaultRunnerdKill) {
		d.fail("runner.suspend: %s %s", res.Status, res.Result)
		return false
	}
	return true
}

// chaosNext is the run a warm rotation hands the runner to.
var chaosNext = prp.Identity{
	RunnerInstanceID: chaosIdentity.RunnerInstanceID, EnvironmentLeaseID: chaosIdentity.EnvironmentLeaseID,
	RunID: "run_chaos_2", NormalizedSessionID: chaosIdentity.NormalizedSessionID, TurnID: "turn_chaos_2", ItemID: "item_chaos_2",
}

// attach rotates the runner to chaosNext with a warm run.attach (prp.md
// §9.5), striking right after queueing it, and waits until the rotation is
// applied or the attach has its result in the old journal (cut before the
// activating write: execution_indeterminate, not applied). The run goes on
// under whichever identity the core holds.
func (d *runDriver) attach(provider map[string]any) bool {
	base := strings.TrimSuffix(d.url, prp.ConnectPath(chaosIdentity.RunID))
	id := d.queue(prp.CommandRunAttach, map[string]any{"provider": provider, "paperclipNextAuthority": map[string]any{
		"identity": chaosNext, "connection": map[string]any{"mode": "connect", "connectUrl": base + prp.ConnectPath(chaosNext.RunID)}}}, "")
	d.strike(PointAttach)
	if id == "" {
		return false
	}
	return d.wait("the rotation or the attach's result", func(s control.Snapshot) bool {
		return (s.Identity == chaosNext && s.Warm == nil) || s.Results[id] != nil
	})
}
