package provider

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// fill sets every field reachable from v to a value that is not zero:
// pointers get a target, slices and maps two entries. n makes the values
// of one call differ from another's. A kind it does not know fails the
// test, so a new kind of field gets a line here before clone can miss it.
func fill(t testing.TB, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(*n))
	case reflect.Uint64, reflect.Uint32, reflect.Uint, reflect.Uint8:
		v.SetUint(uint64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), n)
			}
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(fmt.Sprintf(`{"k":%d}`, *n)))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(t, v.Index(i), n)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(t, k, n)
			fill(t, e, n)
			v.SetMapIndex(k, e)
		}
	default:
		t.Fatalf("fill: no rule for %s", v.Type())
	}
}

// shared fails if a and b (same type) share any pointer, map or slice
// storage.
func shared(t *testing.T, path string, a, b reflect.Value) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return
		}
		require.NotEqual(t, a.Pointer(), b.Pointer(), "%s is shared", path)
		shared(t, path, a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				shared(t, path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))
			}
		}
	case reflect.Slice:
		if a.Len() == 0 || b.Len() == 0 {
			return
		}
		require.NotEqual(t, a.Pointer(), b.Pointer(), "%s is shared", path)
		for i := range min(a.Len(), b.Len()) {
			shared(t, fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i))
		}
	case reflect.Map:
		if a.IsNil() || b.IsNil() {
			return
		}
		require.NotEqual(t, a.Pointer(), b.Pointer(), "%s is shared", path)
		for _, k := range a.MapKeys() {
			if e := b.MapIndex(k); e.IsValid() {
				shared(t, fmt.Sprintf("%s[%v]", path, k), a.MapIndex(k), e)
			}
		}
	}
}

// clone is a deep copy with the record's own JSON, for a record with every
// field set and for empty ones (nil and empty containers keep their JSON).
func TestCloneIsDeepAndMatchesJSON(t *testing.T) {
	var r Record
	n := 0
	fill(t, reflect.ValueOf(&r).Elem(), &n)
	c := r.clone()
	want, err := json.Marshal(r)
	require.NoError(t, err)
	got, err := json.Marshal(c)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got))
	shared(t, "Record", reflect.ValueOf(r), reflect.ValueOf(c))

	empty := Record{Args: []string{}, Process: &ProcessRecord{Wire: WireState{Pending: map[int64]PendingRequest{}}},
		Goal: &GoalRecord{Capability: &GoalCapability{Actions: []string{}}}}
	for _, r := range []Record{{}, empty} {
		want, _ := json.Marshal(r)
		got, _ := json.Marshal(r.clone())
		require.JSONEq(t, string(want), string(got))
	}
}

func BenchmarkRecordClone(b *testing.B) {
	var r Record
	n := 0
	fill(b, reflect.ValueOf(&r).Elem(), &n)
	b.ReportAllocs()
	for b.Loop() {
		_ = r.clone()
	}
}
