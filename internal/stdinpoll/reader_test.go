package stdinpoll

import (
	"encoding/base64"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pcrunner/pcrunner/internal/frame"
	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Handler that records effects as strings.
type recorder struct{ got []string }

func (r *recorder) Stdin(b []byte)   { r.got = append(r.got, "stdin:"+string(b)) }
func (r *recorder) StdinEnd()        { r.got = append(r.got, "end") }
func (r *recorder) Shutdown()        { r.got = append(r.got, "shutdown") }
func (r *recorder) Error(msg string) { r.got = append(r.got, "error:"+msg) }

type fixture struct {
	t    *testing.T
	dir  string
	rec  *recorder
	r    *Reader
	ok   bool
	lost int
}

func newFixture(t *testing.T, maxRetries int) *fixture {
	dir := t.TempDir()
	f, err := os.Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fx := &fixture{t: t, dir: dir, rec: &recorder{}, ok: true}
	fx.r = New(Config{
		Dir: f, MaxRetries: maxRetries, Handler: fx.rec,
		Verify: func() bool { return fx.ok },
		Lost:   func() { fx.lost++ },
	})
	return fx
}

func (fx *fixture) put(seq int64, body string) {
	require.NoError(fx.t, os.WriteFile(filepath.Join(fx.dir, sessiondir.SeqName(seq)), []byte(body), 0o600))
}

func data(s string) string {
	return `{"type":"stdin","data":"` + base64.StdEncoding.EncodeToString([]byte(s)) + `"}` + "\n"
}

func (fx *fixture) present(seq int64) bool {
	_, err := os.Lstat(filepath.Join(fx.dir, sessiondir.SeqName(seq)))
	return err == nil
}

func TestReaderDeliversInOrderAndDeletes(t *testing.T) {
	fx := newFixture(t, 3)
	fx.put(2, data("b"))
	fx.put(1, data("a"))
	fx.put(3, `{"type":"stdinEnd"}`)
	fx.put(4, `{"type":"shutdown"}`)
	fx.r.Scan(false)
	assert.Equal(t, []string{"stdin:a", "stdin:b", "end"}, fx.rec.got, "stdinEnd stops the scan")
	fx.r.Scan(false)
	assert.Equal(t, []string{"stdin:a", "stdin:b", "end", "shutdown"}, fx.rec.got)
	assert.True(t, fx.r.Done())
	for i := int64(1); i <= 4; i++ {
		assert.False(t, fx.present(i))
	}
}

func TestReaderGapOnlyTicksSpendBudget(t *testing.T) {
	fx := newFixture(t, 3)
	fx.put(3, data("c"))
	for range 10 {
		fx.r.Scan(false) // event scans never give up
	}
	assert.Empty(t, fx.rec.got)
	fx.r.Scan(true)
	fx.r.Scan(true)
	assert.Empty(t, fx.rec.got)
	fx.r.Scan(true)
	assert.Equal(t, []string{"error:Advanced past missing stdin files 1 to 2 after 3 retries.", "stdin:c"}, fx.rec.got)
	// A late file below expectedSeq is still processed (reference behaviour).
	fx.put(1, data("late"))
	fx.r.Scan(false)
	assert.Equal(t, "stdin:late", fx.rec.got[len(fx.rec.got)-1])
}

func TestReaderUnreadableRetriedThenDropped(t *testing.T) {
	fx := newFixture(t, 3)
	fx.put(1, `{"type":"stdin","data":"c2VjcmV0`) // truncated, holds "secret"
	fx.put(2, `{"type":"stdinEnd"}`)
	fx.r.Scan(false)
	fx.r.Scan(true)
	fx.r.Scan(true)
	assert.Empty(t, fx.rec.got, "a later file never overtakes")
	assert.True(t, fx.present(1))
	fx.r.Scan(true)
	require.Len(t, fx.rec.got, 2)
	assert.True(t, strings.HasPrefix(fx.rec.got[0], "error:Dropped unreadable stdin file after 3 retries: 000000000001.json: "), fx.rec.got[0])
	assert.NotContains(t, fx.rec.got[0], "c2VjcmV0")
	assert.Equal(t, "end", fx.rec.got[1])
	assert.False(t, fx.present(1))
}

func TestReaderUnreadableKinds(t *testing.T) {
	cases := map[string]func(t *testing.T, path string){
		"empty":  func(t *testing.T, p string) { require.NoError(t, os.WriteFile(p, nil, 0o600)) },
		"binary": func(t *testing.T, p string) { require.NoError(t, os.WriteFile(p, []byte{0, 1, 2, 0xff, 0xfe}, 0o600)) },
		"oversized": func(t *testing.T, p string) {
			f, err := os.Create(p)
			require.NoError(t, err)
			require.NoError(t, f.Truncate(maxFileBytes+1))
			require.NoError(t, f.Close())
		},
	}
	want := map[string]string{
		"empty":     "stdin file is empty",
		"binary":    "invalid JSON at offset",
		"oversized": "stdin file exceeds the 16777216-byte limit",
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t, 2)
			mk(t, filepath.Join(fx.dir, sessiondir.SeqName(1)))
			fx.put(2, data("next"))
			fx.r.Scan(true)
			assert.Empty(t, fx.rec.got)
			fx.r.Scan(true)
			require.Len(t, fx.rec.got, 2, "%v", fx.rec.got)
			assert.Contains(t, fx.rec.got[0], want[name])
			assert.Equal(t, "stdin:next", fx.rec.got[1])
		})
	}
}

func TestReaderIgnoresUnknownAndAfterEnd(t *testing.T) {
	fx := newFixture(t, 3)
	fx.put(1, `{"type":"bogus"}`)
	fx.put(2, `[1,2,3]`)
	fx.put(3, `{"type":"stdin","data":42}`)
	fx.put(4, `{"type":"stdinEnd"}`)
	fx.put(5, data("dropped"))
	fx.put(6, `{"type":"stdinEnd"}`)
	fx.r.Scan(false)
	fx.r.Scan(false)
	fx.r.Scan(false)
	assert.Equal(t, []string{"end"}, fx.rec.got)
	for i := int64(1); i <= 6; i++ {
		assert.False(t, fx.present(i), "file %d consumed", i)
	}
}

func TestReaderNonNumericNamesAndOtherFiles(t *testing.T) {
	fx := newFixture(t, 3)
	require.NoError(t, os.WriteFile(filepath.Join(fx.dir, "abc.json"), []byte(data("x")), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(fx.dir, "000000000001.json.1234.paperclip-upload.b64"), []byte("partial"), 0o600))
	fx.put(1, data("one"))
	fx.r.Scan(false)
	// "000000000001.json" sorts before "abc.json"; the non-numeric name is
	// processed without moving expectedSeq; upload temp files are unlisted.
	assert.Equal(t, []string{"stdin:one", "stdin:x"}, fx.rec.got)
	fx.put(2, data("two"))
	fx.r.Scan(false)
	assert.Equal(t, "stdin:two", fx.rec.got[2])
}

func TestReaderIdentityAndLostDir(t *testing.T) {
	fx := newFixture(t, 3)
	fx.put(1, data("a"))
	fx.ok = false
	fx.r.Scan(true)
	assert.Empty(t, fx.rec.got, "no names when the identity check fails")
	assert.True(t, fx.present(1))
	fx.ok = true
	require.NoError(t, os.RemoveAll(fx.dir))
	fx.r.Scan(true)
	assert.Equal(t, 1, fx.lost, "listing a removed dir latches")
}

func TestReaderBacklogLeavesFiles(t *testing.T) {
	fx := newFixture(t, 2)
	full := true
	fx.r.cfg.Backlogged = func() bool { return full }
	fx.put(1, data("a"))
	for range 5 {
		fx.r.Scan(true)
	}
	assert.Empty(t, fx.rec.got)
	assert.True(t, fx.present(1), "backpressure leaves files on disk, spends nothing")
	full = false
	fx.r.Scan(false)
	assert.Equal(t, []string{"stdin:a"}, fx.rec.got)
}

func TestAppendJSONNamesAllocatesOnlyNames(t *testing.T) {
	fx := newFixture(t, 3)
	for i := range 20 {
		require.NoError(t, os.WriteFile(filepath.Join(fx.dir, "other-"+string(rune('a'+i))), nil, 0o600))
	}
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := fx.r.list(); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "an idle listing must not allocate")
}

// FuzzReaderFileContent feeds arbitrary bytes as stdin file 1: the reader
// never panics, and the file is either consumed or kept for a retry.
func FuzzReaderFileContent(f *testing.F) {
	for _, s := range []string{data("hi"), `{"type":"stdinEnd"}`, `{"type":"shutdown"}`, "", "{", "\x00\xff", `{"type":"stdin","data":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fx := newFixture(t, 1000)
		require.NoError(t, os.WriteFile(filepath.Join(fx.dir, sessiondir.SeqName(1)), b, 0o600))
		fx.r.Scan(true)
		_, perr := frame.ParseMessage(b)
		assert.Equal(t, perr != nil, fx.present(1), "kept exactly when unreadable")
	})
}

// A scan stopped by backpressure keeps the rest of its listing: later
// scans go on in order, and when the kept names run out a fresh listing
// picks up what arrived meanwhile, in the same scan.
func TestReaderBacklogResumesKeptListing(t *testing.T) {
	fx := newFixture(t, 3)
	room := 2
	fx.r.cfg.Backlogged = func() bool { return room == 0 }
	h := &countingHandler{recorder: fx.rec, room: &room}
	fx.r.cfg.Handler = h
	for i := int64(1); i <= 5; i++ {
		fx.put(i, data(string(rune('a'+i-1))))
	}
	fx.r.Scan(false)
	assert.Equal(t, []string{"stdin:a", "stdin:b"}, fx.rec.got)
	assert.Len(t, fx.r.resume, 3)
	fx.put(6, data("f")) // after the listing
	fx.put(7, `{"type":"stdinEnd"}`)
	room = 2
	fx.r.Scan(false)
	room = 100
	fx.r.Scan(false)
	assert.Equal(t, []string{"stdin:a", "stdin:b", "stdin:c", "stdin:d", "stdin:e", "stdin:f", "end"}, fx.rec.got)
	assert.Nil(t, fx.r.resume)
}

// A kept listing that went stale (a file gone, so a gap) is not trusted:
// the scan lists again and decides on what is there, spending the tick's
// budget once.
func TestReaderBacklogStaleListingRelists(t *testing.T) {
	fx := newFixture(t, 3)
	room := 1
	fx.r.cfg.Backlogged = func() bool { return room == 0 }
	fx.r.cfg.Handler = &countingHandler{recorder: fx.rec, room: &room}
	for i := int64(1); i <= 3; i++ {
		fx.put(i, data(string(rune('a'+i-1))))
	}
	fx.r.Scan(false)
	require.Len(t, fx.r.resume, 2)
	require.NoError(t, os.Remove(filepath.Join(fx.dir, sessiondir.SeqName(2))))
	room = 100
	fx.r.Scan(true)
	assert.Equal(t, []string{"stdin:a"}, fx.rec.got, "3 waits for the missing 2")
	assert.Equal(t, 1, fx.r.gapRetries, "one tick spent, on the fresh listing")
	assert.True(t, fx.present(3))
}

// countingHandler records like recorder and uses up room per stdin chunk.
type countingHandler struct {
	*recorder
	room *int
}

func (c *countingHandler) Stdin(b []byte) {
	c.recorder.Stdin(b)
	*c.room--
}

// Only regular files are queue files: a directory, a symlink or a fifo
// named like one is not listed (as in the events reader), so it is a gap
// (given up after the tick budget) and never jams the queue: a directory named 000000000001.json can be
// neither read nor removed, so a scan that listed it would stop at it
// every time.
func TestReaderNonRegularEntriesAreNotQueueFiles(t *testing.T) {
	cases := map[string]func(t *testing.T, path string){
		"directory": func(t *testing.T, p string) { require.NoError(t, os.Mkdir(p, 0o700)) },
		"symlink": func(t *testing.T, p string) {
			target := filepath.Join(t.TempDir(), "target")
			require.NoError(t, os.WriteFile(target, []byte(`{"type":"shutdown"}`), 0o600))
			require.NoError(t, os.Symlink(target, p))
		},
		"fifo": func(t *testing.T, p string) { require.NoError(t, syscall.Mkfifo(p, 0o600)) },
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t, 2)
			mk(t, filepath.Join(fx.dir, sessiondir.SeqName(1)))
			fx.put(2, data("next"))
			fx.r.Scan(true)
			assert.Empty(t, fx.rec.got)
			fx.r.Scan(true)
			assert.Equal(t, []string{"error:Advanced past missing stdin files 1 to 1 after 2 retries.", "stdin:next"}, fx.rec.got)
			fx.put(3, `{"type":"shutdown"}`)
			fx.r.Scan(false) // an event scan: nothing to wait for any more
			assert.Equal(t, "shutdown", fx.rec.got[len(fx.rec.got)-1], "a later shutdown is seen at once")
			assert.True(t, fx.present(1), "the entry itself is left alone")
		})
	}
}

// A dropped file that cannot be removed still advances the queue and is
// reported once: later scans skip it instead of retrying it as a late
// file and dropping it again every 5 s.
func TestReaderUndeletableDropReportedOnce(t *testing.T) {
	fx := newFixture(t, 2)
	stuck := sessiondir.SeqName(1)
	fx.r.unlink = func(dfd int, name string) error {
		if name == stuck {
			return syscall.EACCES
		}
		return syscall.Unlinkat(dfd, name)
	}
	fx.put(1, data("a"))
	fx.put(2, data("b"))
	fx.r.Scan(true)
	fx.r.Scan(true)
	require.Equal(t, []string{"error:Dropped unreadable stdin file after 2 retries: 000000000001.json: unlink: EACCES", "stdin:b"}, fx.rec.got)
	fx.put(3, data("c"))
	fx.r.Scan(false)
	for range 5 {
		fx.r.Scan(true)
	}
	fx.put(4, `{"type":"shutdown"}`)
	fx.r.Scan(false)
	assert.Equal(t, []string{"error:Dropped unreadable stdin file after 2 retries: 000000000001.json: unlink: EACCES", "stdin:b", "stdin:c", "shutdown"}, fx.rec.got)
	assert.True(t, fx.present(1))
}

// A name with 20 or more digits orders as the reference's parseInt gives
// it (a JavaScript number) and never wraps the counter: after it, the
// host's next files are late files, processed at once (an int64 counter
// would wrap to -2^63 and stall 5 s behind a bogus gap).
func TestReaderHugeSeqNameDoesNotWrap(t *testing.T) {
	fx := newFixture(t, 2)
	require.NoError(t, os.WriteFile(filepath.Join(fx.dir, "99999999999999999999.json"), []byte(data("huge")), 0o600))
	fx.r.Scan(true)
	fx.r.Scan(true)
	require.Equal(t, []string{"error:Advanced past missing stdin files 1 to 100000000000000000000 after 2 retries.", "stdin:huge"}, fx.rec.got)
	fx.put(1, data("a"))
	fx.put(2, `{"type":"stdinEnd"}`)
	fx.r.Scan(false)
	assert.Equal(t, []string{"error:Advanced past missing stdin files 1 to 100000000000000000000 after 2 retries.", "stdin:huge", "stdin:a", "end"}, fx.rec.got)
}

func TestSeqOfMatchesParseInt(t *testing.T) {
	cases := []struct {
		name string
		want float64
		ok   bool
	}{
		{"000000000001.json", 1, true},
		{"000000000042.json", 42, true},
		{" \t12abc.json", 12, true},
		{"+7.json", 7, true},
		{"-5.json", -5, true},
		{"9223372036854775807.json", 9223372036854775807, true},
		{"99999999999999999999.json", 1e20, true},
		{"1000000000000000000000.json", 1e21, true},
		{"-99999999999999999999.json", -1e20, true},
		{strings.Repeat("9", 400) + ".json", math.Inf(1), true},
		{"abc.json", 0, false},
		{"-.json", 0, false},
	}
	for _, c := range cases {
		got, ok := seqOf(c.name)
		assert.Equal(t, c.ok, ok, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
	a, _ := seqOf("99999999999999999999.json")
	b, _ := seqOf("1000000000000000000000.json")
	assert.Less(t, a, b, "names past int64 keep their order")
	assert.Equal(t, a, a+1, "and +1 rounds as in JavaScript")
	for f, want := range map[float64]string{1: "1", -4: "-4", 1e20: "100000000000000000000", 1e21: "1e+21", -1.5e22: "-1.5e+22", math.Inf(1): "Infinity"} {
		assert.Equal(t, want, jsNumber(f))
	}
}

// FuzzSeqOf: any name parses without panic; numeric exactly when
// sessiondir.ParseSeq says so, and equal to it wherever int64 is exact.
func FuzzSeqOf(f *testing.F) {
	for _, s := range []string{"000000000001.json", "99999999999999999999.json", "-1.json", " 7", "abc", "\u00a012", strings.Repeat("9", 400)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, ok := seqOf(name)
		v, want := sessiondir.ParseSeq(name)
		require.Equal(t, want, ok)
		if ok && v != math.MaxInt64 && v != math.MinInt64 {
			require.Equal(t, float64(v), got)
		}
		if ok && (v == math.MaxInt64 || v == math.MinInt64) {
			require.GreaterOrEqual(t, math.Abs(got), float64(math.MaxInt64))
		}
	})
}
