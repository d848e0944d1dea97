package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// openTextBytes is the text the message holds before the stamped chunks
// of BenchmarkAgentMessageOnWireOpenText extend it.
const openTextBytes = 40 << 10

// BenchmarkAgentMessageOnWireOpenText: runnerd's and pcwrap's CPU per
// message as in BenchmarkAgentMessageOnWire, but each stamped chunk
// extends a message that already holds 40 KiB of text: a step's cost
// must not grow with the open item's text (the item text is appended,
// not rewritten with the record). Figures only.
func BenchmarkAgentMessageOnWireOpenText(b *testing.B) {
	const n = 150
	r := newBenchRig(b, "acp")
	pcwrap := 0
	var runnerdRun, pcwrapRun time.Duration
	turns := 0
	for i := 0; b.Loop(); i++ {
		if pcwrap == 0 {
			pcwrap = envPid(b, "PAPERCLIP_PROCESS_SESSION_DIR="+r.dir+"/")
		}
		rr, _ := schedstat(r.pid)
		pr, _ := schedstat(pcwrap)
		benchRun(b, r, "turn.start", map[string]any{"text": "echo " + strings.Repeat("y", openTextBytes) + fmt.Sprintf(" ;; stamp %d %d", n, messageGap.Milliseconds())})
		waitTerminals(b, r, i+1)
		rr2, _ := schedstat(r.pid)
		pr2, _ := schedstat(pcwrap)
		runnerdRun, pcwrapRun = runnerdRun+rr2-rr, pcwrapRun+pr2-pr
		turns++
	}
	per := func(d time.Duration) time.Duration { return d / time.Duration(turns*n) }
	b.ReportMetric(float64(per(runnerdRun).Microseconds()), "runnerd-cpu-us/msg")
	b.ReportMetric(float64(per(pcwrapRun).Microseconds()), "pcwrap-cpu-us/msg")
}
