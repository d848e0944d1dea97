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
// outbox (sequence, type, priority, size), the records and the texts
// (names and sizes). It changes nothing and never blocks or waits for a live
// runnerd (see Read). Nothing is printed unless the whole state was read
// and decoded. Strings from the state are quoted.
func Dump(dir string, w io.Writer) error {
	st, file, size, err := read(dir)
	if err != nil {
		return err
	}
	return dumpState(st, file, size, w)
}

// Read returns the committed state in dir, outbox and records included,
// without changing anything: the directory is opened read-only without
// following a symlink, never created or re-moded. The store is read from
// a private copy (openDBSnapshot), so a live runnerd's lock is neither
// taken nor waited for; an old-format directory not yet migrated is read
// from FileName.
func Read(dir string) (*State, error) {
	st, _, _, err := read(dir)
	return st, err
}

func read(dir string) (st *State, file string, size int64, err error) {
	d, err := openDirReadOnly(dir)
	if err != nil {
		return nil, "", 0, err
	}
	defer d.close()
	db, size, err := d.openDBSnapshot(maxInspectBytes)
	if err == nil {
		defer db.Close()
		err = guardStore(func() (err error) { st, _, err = loadDB(db); return err })
		return st, DBName, size, err
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, "", 0, err
	}
	b, err := d.readConsistent(maxInspectBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", 0, fmt.Errorf("no %s or %s in the state directory", DBName, FileName)
	}
	if err != nil {
		return nil, "", 0, err
	}
	st, err = decodeState(b)
	return st, FileName, int64(len(b)), err
}

func dumpState(st *State, file string, fileBytes int64, out io.Writer) error {
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
	row("file", fmt.Sprintf("%s (%d bytes)", file, fileBytes))
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
	fmt.Fprintf(w, "\ntexts: %d\n", len(st.Texts))
	if len(st.Texts) > 0 {
		fmt.Fprintln(w, "  name\tbytes")
	}
	for _, k := range slices.Sorted(maps.Keys(st.Texts)) {
		fmt.Fprintf(w, "  %s\t%d\n", str(k), len(st.Texts[k]))
	}
	return w.Flush()
}
