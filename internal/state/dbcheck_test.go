package state

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// storeFixtureBytes is a closed fixture store's file and its projection.
func storeFixtureBytes(t testing.TB) (db, projection []byte) {
	t.Helper()
	cfg, s := dumpFixture(t)
	require.NoError(t, s.Close())
	db, err := os.ReadFile(filepath.Join(cfg.Dir, DBName))
	require.NoError(t, err)
	projection, err = os.ReadFile(filepath.Join(cfg.Dir, FileName))
	require.NoError(t, err)
	return db, projection
}

// damagedDir writes a state directory whose store file is db.
func damagedDir(t *testing.T, db, projection []byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, DBName), db, fileMode))
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), projection, fileMode))
	return dir
}

// storeDamage is one way of damaging a store file.
type storeDamage struct {
	name string
	file []byte
	// clear: the damage is certain to be found (the whole tree or a meta
	// page bbolt needs is gone), so both readers must refuse it.
	clear bool
}

// storeDamages truncates, zero-fills and flips bits of a valid store
// file: whole-file and per-page cases, and flips in every page's header
// and element area.
func storeDamages(db []byte) []storeDamage {
	ps := int(binary.LittleEndian.Uint32(db[boltPageHeader+8:]))
	pages := len(db) / ps
	var out []storeDamage
	for _, n := range []int{0, 64, ps - 1, ps, 2 * ps, len(db) / 2, len(db) - ps} {
		out = append(out, storeDamage{fmt.Sprintf("truncated-%d", n), db[:n:n], n < len(db)-ps || n < 4*ps})
	}
	out = append(out, storeDamage{"zero-filled", make([]byte, len(db)), true})
	out = append(out, storeDamage{"cycle", rootCycle(db, ps), true})
	for p := range pages {
		b := append([]byte(nil), db...)
		clear(b[p*ps : (p+1)*ps])
		out = append(out, storeDamage{fmt.Sprintf("zero-page-%d", p), b, false})
		for _, off := range []int{0, 3, 8, 10, 12, 16, 20, 24, 28, 40, 48, 56, 63, 100, ps / 2, ps - 1} {
			for _, bit := range []byte{0x01, 0x80} {
				b := append([]byte(nil), db...)
				b[p*ps+off] ^= bit
				out = append(out, storeDamage{fmt.Sprintf("flip-page-%d-byte-%d-bit-%#x", p, off, bit), b, false})
			}
		}
	}
	return out
}

// TestDamagedStoreGivesClearError: a truncated, zero-filled or bit-flipped
// store file never crashes `state dump` (Read) nor runnerd's own open:
// each either reads (the damage hit bytes nothing uses) or fails with a
// clear error wrapping errCorruptState; damage that leaves no valid tree
// is always refused, with "runner state store is damaged".
func TestDamagedStoreGivesClearError(t *testing.T) {
	db, projection := storeFixtureBytes(t)
	refused := 0
	for _, d := range storeDamages(db) {
		dir := damagedDir(t, d.file, projection)
		_, rerr := Read(dir)
		_, oerr := func() (*Store, error) {
			s, err := Open(testConfig(dir))
			if err == nil {
				return s, s.Close()
			}
			return nil, err
		}()
		for what, err := range map[string]error{"read": rerr, "open": oerr} {
			if err == nil {
				require.False(t, d.clear, "%s: %s accepted a store that cannot be read", d.name, what)
				continue
			}
			refused++
			require.ErrorIs(t, err, errCorruptState, "%s: %s", d.name, what)
			if d.clear {
				require.Contains(t, err.Error(), "runner state store is damaged", "%s: %s", d.name, what)
			}
		}
	}
	require.Positive(t, refused)
	t.Logf("%d damaged stores, %d refusals", len(storeDamages(db)), refused)
}

// TestCheckStoreFileAcceptsValidStores: the walk accepts what bbolt
// writes, fresh, filled and compacted.
func TestCheckStoreFileAcceptsValidStores(t *testing.T) {
	db, _ := storeFixtureBytes(t)
	require.NoError(t, checkStoreFile(bytesReaderAt(db), int64(len(db))))
}

// bytesReaderAt reads a byte slice at offsets.
type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// FuzzDamagedStore: any damage to a valid store file (a byte changed, the
// file cut short) makes Read return a state or an error wrapping
// errCorruptState; never a panic, a fault or a hang.
func FuzzDamagedStore(f *testing.F) {
	valid, projection := storeFixtureBytes(f)
	f.Add(uint32(0), byte(0), uint32(0))
	f.Add(uint32(4096+16), byte(1), uint32(0))
	f.Add(uint32(2*4096+20), byte(0xff), uint32(0))
	f.Add(uint32(3*4096+10), byte(0x40), uint32(5*4096))
	f.Fuzz(func(t *testing.T, off uint32, xor byte, cut uint32) {
		db := append([]byte(nil), valid...)
		if cut != 0 && int(cut) < len(db) {
			db = db[:cut]
		}
		if len(db) > 0 {
			db[int(off)%len(db)] ^= xor
		}
		_, err := Read(damagedDir(t, db, projection))
		if err != nil {
			require.ErrorIs(t, err, errCorruptState)
		}
	})
}

// rootCycle turns the root bucket's page of db into a branch page whose
// one child is itself: bbolt would recurse on it without end.
func rootCycle(db []byte, ps int) []byte {
	m0, _ := parseMeta(db[boltPageHeader:])
	m1, _ := parseMeta(db[ps+boltPageHeader:])
	m := m0
	if m1.txid > m0.txid {
		m = m1
	}
	b := append([]byte(nil), db...)
	p := b[int(m.root)*ps:]
	le := binary.LittleEndian
	le.PutUint16(p[8:], boltBranchPage)
	le.PutUint16(p[10:], 1)
	le.PutUint32(p[12:], 0)
	le.PutUint32(p[boltPageHeader:], boltElementSize) // the key follows the element
	le.PutUint32(p[boltPageHeader+4:], 1)
	le.PutUint64(p[boltPageHeader+8:], m.root)
	return b
}
