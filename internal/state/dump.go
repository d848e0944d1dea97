package state

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/pcrunner/pcrunner/internal/quote"
)

// Dump prints the state in dir for an operator: the header fields, the
// outbox (sequence, type, priority, size) and the records (names and
// sizes). It changes nothing: the directory is opened read-only without
// following a symlink, never created or re-moded, and no lock is taken,
// so a live runnerd is never blocked; a file that a live runnerd replaces
// during the read is read again (bounded). Nothing is printed unless the
// whole file was read and decoded. Strings from the file are quoted.
func Dump(dir string, w io.Writer) error {
	d, err := openDirReadOnly(dir)
	if err != nil {
		return err
	}
	defer d.close()
	b, err := d.readConsistent(maxInspectBytes)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no %s in the state directory", FileName)
	}
	if err != nil {
		return err
	}
	st, err := decodeState(b)
	if err != nil {
		return err
	}
	return dumpState(st, len(b), w)
}

func dumpState(st *State, fileBytes int, out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(w, "%s:\t%v\n", k, v) }
	str := func(s string) string { return quote.Text(s) }
	opt := func(s *string) string {
		if s == nil {
			return "null"
		}
		return str(*s)
	}
	fence := func(f *TerminalFence) string {
		if f == nil {
			return "null"
		}
		return fmt.Sprintf("%s seq %d %s -> %s", str(f.CommandID), f.ControllerSeq, str(f.CommandType), str(string(f.Lifecycle)))
	}
	version := "null"
	if st.LastConnectionProtocolVersion != nil {
		version = strconv.Itoa(*st.LastConnectionProtocolVersion)
	}
	row("file", fmt.Sprintf("%s (%d bytes)", FileName, fileBytes))
	row("schema", str(st.Schema))
	row("runnerInstanceId", str(st.RunnerInstanceID))
	row("environmentLeaseId", str(st.EnvironmentLeaseID))
	row("runId", str(st.RunID))
	row("normalizedSessionId", str(st.NormalizedSessionID))
	row("turnId", str(st.TurnID))
	row("itemId", str(st.ItemID))
	row("lifecycle", str(string(st.Lifecycle)))
	row("nextSourceSeq", st.NextSourceSeq)
	row("ackedSourceSeq", st.AckedSourceSeq)
	row("lastControllerCommandSeq", st.LastControllerCommandSeq)
	row("compactedThroughControllerSeq", st.CompactedThroughControllerSeq)
	row("reconnectCount", st.ReconnectCount)
	row("maxOutboxBytes", st.MaxOutboxBytes)
	row("p0ReserveBytes", st.P0ReserveBytes)
	row("peakOutboxBytes", st.PeakOutboxBytes)
	row("backpressure", st.Backpressure)
	row("recoverableFailure", opt(st.RecoverableFailure))
	row("revocationEpoch", st.RevocationEpoch)
	row("turnEnded", st.TurnEnded)
	row("lastConnectionProtocolVersion", version)
	row("pendingTerminalDelivery", fence(st.PendingTerminalDelivery))
	row("pendingProviderCleanup", fence(st.PendingProviderCleanup))
	row("warmTransition", fmt.Sprintf("%d bytes", len(st.WarmTransition)))
	row("processedCommands", len(st.ProcessedCommands))
	row("executorEventReceipts", len(st.ExecutorEventReceipts))
	row("v2ReplayEvents", len(st.V2ReplayEvents))
	row("diagnostics", len(st.Diagnostics))
	if err := w.Flush(); err != nil {
		return err
	}

	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\noutbox: %d events, %d bytes\n", len(st.Outbox), st.outboxBytes())
	if len(st.Outbox) > 0 {
		fmt.Fprintln(w, "  sourceSeq\ttype\tpriority\tbytes")
	}
	for _, e := range st.Outbox {
		fmt.Fprintf(w, "  %d\t%s\tP%d\t%d\n", e.SourceSeq, str(e.EventType), e.Priority, e.ByteSize)
	}
	fmt.Fprintf(w, "\nrecords: %d\n", len(st.Extensions))
	if len(st.Extensions) > 0 {
		fmt.Fprintln(w, "  name\tbytes")
	}
	for _, k := range slices.Sorted(maps.Keys(st.Extensions)) {
		fmt.Fprintf(w, "  %s\t%d\n", str(k), len(st.Extensions[k]))
	}
	return w.Flush()
}
