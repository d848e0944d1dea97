package procsession

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUUIDRoundTrip(t *testing.T) {
	u, err := newUUID()
	require.NoError(t, err)
	got, err := ParseUUID(u)
	require.NoError(t, err)
	require.Equal(t, u, got)
	for _, bad := range []string{"", "../x", u[:35] + "G", u + "0", "0D9C1A52-7A8E-4C1B-9F0E-2B8F5F3C9A11"} {
		_, err := ParseUUID(bad)
		require.Error(t, err, bad)
	}
}

func FuzzParseUUID(f *testing.F) {
	f.Add("0d9c1a52-7a8e-4c1b-9f0e-2b8f5f3c9a11")
	f.Add("../../etc/passwd")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseUUID(s)
		if err != nil {
			return
		}
		for _, c := range got {
			if c == '/' || c == '.' {
				t.Fatal("a uuid that can leave its directory")
			}
		}
	})
}

func FuzzParseChildRecord(f *testing.F) {
	f.Add([]byte(`{"pgid":1234,"startTime":99}`))
	f.Add([]byte(`{"pgid":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := ParseChildRecord(b)
		if err == nil && rec.Pgid <= 1 {
			t.Fatal("accepted a group id that would hit runnerd or init")
		}
	})
}
