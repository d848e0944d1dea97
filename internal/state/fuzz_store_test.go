package state

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// FuzzLoadStore: whatever values the store holds (a header, one outbox
// key and value, one record) either load into a state that dumps and
// whose header re-encodes, or fail with errCorruptState.
func FuzzLoadStore(f *testing.F) {
	var h headerEncoder
	st := (&Store{cfg: testConfig("")}).fresh()
	header, err := h.encode(st)
	if err != nil {
		f.Fatal(err)
	}
	ev := OutboxEvent{SourceSeq: 1, Priority: P1, EventType: "item.delta", Envelope: []byte(`{"payload":{"sourceSeq":1}}`), ByteSize: 27}
	value, err := encodeOutboxEvent(ev)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(header, seqKey(1), value, "acpAgent", []byte(`{"a":1}`))
	f.Add([]byte(`{}`), []byte("k"), []byte(`[]`), "outbox", []byte(`1`))
	f.Add([]byte(`{"outbox":[{"indexedPending":true}]}`), seqKey(2), value, "r", []byte(`{`))
	// One store per fuzzing process (each worker runs this setup).
	dir, err := os.MkdirTemp(f.TempDir(), "store")
	if err != nil {
		f.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, DBName), fileMode, &bolt.Options{NoSync: true, Timeout: dbLockTimeout})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = db.Close() })
	f.Fuzz(func(t *testing.T, header, key, value []byte, name string, record []byte) {
		if len(key) == 0 || len(key) > bolt.MaxKeySize || name == "" || len(name) > bolt.MaxKeySize {
			return
		}
		err := db.Update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{bucketHeader, bucketOutbox, bucketRecords} {
				if tx.Bucket(b) != nil {
					if err := tx.DeleteBucket(b); err != nil {
						return err
					}
				}
			}
			hb, err := tx.CreateBucket(bucketHeader)
			if err != nil {
				return err
			}
			ob, err := tx.CreateBucket(bucketOutbox)
			if err != nil {
				return err
			}
			rb, err := tx.CreateBucket(bucketRecords)
			if err != nil {
				return err
			}
			if err := hb.Put(keyHeader, header); err != nil {
				return err
			}
			if err := ob.Put(key, value); err != nil {
				return err
			}
			return rb.Put([]byte(name), record)
		})
		if err != nil {
			t.Fatal(err)
		}
		st, _, err := loadDB(db)
		if err != nil {
			if !errors.Is(err, errCorruptState) {
				t.Fatalf("load error does not wrap errCorruptState: %v", err)
			}
			return
		}
		if err := dumpState(st, DBName, 0, io.Discard); err != nil {
			t.Fatalf("dump: %v", err)
		}
		var h headerEncoder
		if _, err := h.encode(st); err != nil {
			t.Fatalf("a loaded state's header must encode: %v", err)
		}
	})
}
