package state

import (
	"reflect"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every field of State is either crash-visible (its change syncs the
// directory) or may lag after a power loss; a field added later must be
// put in one list or the other, and each listed field, changed alone,
// gets its verdict.
func TestCrashVisibleChange(t *testing.T) {
	visible := []string{
		"Schema", "RunnerInstanceID", "EnvironmentLeaseID", "RunID", "NormalizedSessionID", "TurnID", "ItemID",
		"Lifecycle", "Backpressure", "MaxOutboxBytes", "P0ReserveBytes", "RecoverableFailure",
		"PendingTerminalDelivery", "PendingProviderCleanup", "WarmTransition", "RevocationEpoch",
	}
	lagging := []string{
		"NextSourceSeq", "AckedSourceSeq", "LastControllerCommandSeq", "CompactedThroughControllerSeq",
		"ReconnectCount", "PeakOutboxBytes", "Outbox", "ProcessedCommands", "ProcessedCommandFingerprints",
		"ExecutorEventReceipts", "V2ReplayEvents", "LastConnectionProtocolVersion", "Diagnostics",
		"TurnEnded", "CompactedCommandFilter", "Extensions", "Texts",
	}
	typ := reflect.TypeFor[State]()
	var all []string
	for i := range typ.NumField() {
		if typ.Field(i).IsExported() {
			all = append(all, typ.Field(i).Name)
		}
	}
	require.ElementsMatch(t, all, slices.Concat(visible, lagging), "every exported field is classified")

	base := &State{}
	require.False(t, crashVisibleChange(base, base.Clone()))
	for _, name := range all {
		changed := base.Clone()
		changeField(t, reflect.ValueOf(changed).Elem().FieldByName(name))
		require.Equal(t, slices.Contains(visible, name), crashVisibleChange(base, changed), name)
		require.Equal(t, slices.Contains(visible, name), crashVisibleChange(changed, base), name)
	}

	// A fence changed in place of another is a change, one left equal is not.
	a := &State{PendingTerminalDelivery: &TerminalFence{CommandID: "cmd_1", Lifecycle: Ready}}
	b := &State{PendingTerminalDelivery: &TerminalFence{CommandID: "cmd_1", Lifecycle: Ready}}
	require.False(t, crashVisibleChange(a, b))
	b.PendingTerminalDelivery.ControllerSeq = 7
	require.True(t, crashVisibleChange(a, b))
}

// changeField sets v to a value other than its zero value.
func changeField(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Int:
		v.SetInt(v.Int() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		changeField(t, s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem())
		v.Set(m)
	case reflect.Uint8:
		v.SetUint(v.Uint() + 1)
	case reflect.Struct:
		// Outbox events: a zero event differs from no event by the slice
		// itself; nothing to change inside.
	default:
		t.Fatalf("no change for a field of kind %s", v.Kind())
	}
}
