package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/pcrunner/pcrunner/internal/jsonenc"
)

// The durable store (durability.md §7.2): a bbolt file beside FileName
// holds the outbox, the records and the header; FileName is the header's
// projection for the server.
const (
	// DBName is the store inside the state directory. It has no .sqlite
	// suffix: the server's archive code keys on runner-state.sqlite.
	DBName = "runner-state.db"
	// dbTempName is the store being built by a migration or for a fresh
	// state; it becomes DBName by a rename once it is durable, and is
	// redone when found.
	dbTempName = DBName + ".tmp"
	// dbCompactName is a compacted copy being built; a leftover is removed.
	dbCompactName = DBName + ".compact"
	// compactMinBytes: a store smaller than this is never compacted.
	compactMinBytes = 4 << 20
	// compactRatio: a store larger than compactRatio times its live data
	// (events, records, header) is compacted on open and on close.
	compactRatio = 4
	// outboxFillPercent: the outbox's keys are appended in order, so its
	// pages are filled whole rather than split in half (bbolt's default
	// for random inserts), which keeps the tree a level lower.
	outboxFillPercent = 1.0
	// compactTxBytes bounds one transaction of a compaction's copy.
	compactTxBytes = 16 << 20
)

var (
	bucketOutbox  = []byte("outbox")  // big-endian sourceSeq -> outbox event
	bucketRecords = []byte("records") // record name -> raw JSON
	bucketHeader  = []byte("header")  // keyHeader -> the header (FileName's projection)
	keyHeader     = []byte("state")
	// outboxView is the projection's outbox while events are pending
	// (the reference's inspection view).
	outboxView = []byte(`[{"indexedPending":true}]`)
)

// seqKey is the outbox bucket's key of seq: big-endian, so keys sort by seq.
func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// encodeOutboxEvent is an event's stored form: the object FileName's outbox
// held before the store, so a migrated event keeps its bytes.
func encodeOutboxEvent(e OutboxEvent) ([]byte, error) {
	typ, err := jsonenc.Marshal(e.EventType)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(e.Envelope)+len(typ)+96)
	b = append(b, `{"sourceSeq":`...)
	b = strconv.AppendUint(b, e.SourceSeq, 10)
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, int64(e.Priority), 10)
	b = append(b, `,"eventType":`...)
	b = append(b, typ...)
	b = append(b, `,"envelope":`...)
	b = append(b, e.Envelope...)
	b = append(b, `,"byteSize":`...)
	b = strconv.AppendInt(b, int64(e.ByteSize), 10)
	return append(b, '}'), nil
}

// sameBytes reports whether a and b are the same bytes; the identity test
// first, since an unchanged record or event keeps its slice.
func sameBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return bytes.Equal(a, b)
}

// headerEncoder encodes the header (every State field but the outbox and
// the records, with the outbox view). It keeps the encodings of the
// journal entries, which dominate the header (up to maxRecentCommands
// results of maxCommandResultBytes), so a step re-encodes only the
// entries it changed.
type headerEncoder struct {
	entries map[string]encodedResult
}

type encodedResult struct {
	res CommandResult
	enc []byte // `"id":{...}`
}

func (r encodedResult) same(c CommandResult) bool {
	return r.res.CommandID == c.CommandID && r.res.ControllerSeq == c.ControllerSeq &&
		r.res.CommandType == c.CommandType && r.res.Status == c.Status && sameBytes(r.res.Result, c.Result)
}

// outboxPending is the view rule: events are pending exactly when some
// produced event is not acknowledged.
func (st *State) outboxPending() bool { return st.NextSourceSeq != st.AckedSourceSeq+1 }

// encode returns st's header.
func (h *headerEncoder) encode(st *State) ([]byte, error) {
	c := *st
	c.normalize()
	c.Outbox = []OutboxEvent{}
	c.ProcessedCommands = map[string]CommandResult{}
	c.Extensions = nil
	b, err := jsonenc.Marshal((*plainState)(&c))
	if err != nil {
		return nil, err
	}
	// The placeholders are the first occurrences: a string value holds a
	// quote only escaped, so it cannot contain either.
	const outboxMark, journalMark = `"outbox":[]`, `"processedCommands":{}`
	i := bytes.Index(b, []byte(outboxMark))
	j := bytes.Index(b, []byte(journalMark))
	if i < 0 || j < i {
		return nil, errors.New("encode state header: placeholder missing")
	}
	next := make(map[string]encodedResult, len(st.ProcessedCommands))
	size := len(b) + len(outboxView)
	for k, r := range st.ProcessedCommands {
		e, ok := h.entries[k]
		if !ok || !e.same(r) {
			key, err := jsonenc.Marshal(k)
			if err != nil {
				return nil, err
			}
			v, err := jsonenc.Marshal(r)
			if err != nil {
				return nil, err
			}
			e = encodedResult{res: r, enc: slices.Concat(key, []byte{':'}, v)}
		}
		next[k] = e
		size += len(e.enc) + 1
	}
	h.entries = next
	out := make([]byte, 0, size)
	out = append(out, b[:i+len(`"outbox":`)]...)
	if st.outboxPending() {
		out = append(out, outboxView...)
	} else {
		out = append(out, "[]"...)
	}
	out = append(out, b[i+len(outboxMark):j+len(`"processedCommands":{`)]...)
	for n, k := range slices.Sorted(maps.Keys(next)) {
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, next[k].enc...)
	}
	return append(out, b[j+len(journalMark)-1:]...), nil
}

// putDelta writes into tx what turns the stored state from (nil: an empty
// store) into st with header: the events appended since, the acknowledged
// ones removed, the newest stored event when a merge changed it, the
// records whose bytes changed, the texts' new bytes, and the header. It reports whether it
// changed anything.
func putDelta(tx *bolt.Tx, from, st *State, fromHeader, header []byte) (bool, error) {
	ob, err := tx.CreateBucketIfNotExists(bucketOutbox)
	if err != nil {
		return false, err
	}
	// Keys only ever grow at the end: full pages, not half-full splits.
	ob.FillPercent = outboxFillPercent
	rb, err := tx.CreateBucketIfNotExists(bucketRecords)
	if err != nil {
		return false, err
	}
	hb, err := tx.CreateBucketIfNotExists(bucketHeader)
	if err != nil {
		return false, err
	}
	tb, err := tx.CreateBucketIfNotExists(bucketTexts)
	if err != nil {
		return false, err
	}
	changed := false
	put := func(b *bolt.Bucket, k, v []byte) error { changed = true; return b.Put(k, v) }
	del := func(b *bolt.Bucket, k []byte) error { changed = true; return b.Delete(k) }

	var old []OutboxEvent
	var oldRecords map[string]json.RawMessage
	var oldTexts map[string][]byte
	if from != nil {
		old, oldRecords, oldTexts = from.Outbox, from.Extensions, from.Texts
	}
	// Both outboxes are contiguous runs of sequence numbers, so only
	// their ends are walked: a step costs nothing per unchanged event.
	first, last := seqRange(st.Outbox)
	oFirst, oLast := seqRange(old)
	for i := 0; i < len(old) && (old[i].SourceSeq < first || old[i].SourceSeq > last); i++ {
		if err := del(ob, seqKey(old[i].SourceSeq)); err != nil {
			return false, err
		}
	}
	for i := len(old) - 1; i >= 0 && old[i].SourceSeq > last && old[i].SourceSeq >= first; i-- {
		if err := del(ob, seqKey(old[i].SourceSeq)); err != nil {
			return false, err
		}
	}
	// New events are the suffix above the old last one. Of the events
	// both hold only the old last one can have changed: a P2 merge
	// rewrites the newest event, and only before it is sent.
	i := len(st.Outbox)
	for i > 0 && (len(old) == 0 || st.Outbox[i-1].SourceSeq > oLast || st.Outbox[i-1].SourceSeq < oFirst) {
		i--
	}
	if i > 0 && st.Outbox[i-1].SourceSeq == oLast && !sameBytes(old[len(old)-1].Envelope, st.Outbox[i-1].Envelope) {
		i--
	}
	for _, e := range st.Outbox[i:] {
		v, err := encodeOutboxEvent(e)
		if err != nil {
			return false, err
		}
		if err := put(ob, seqKey(e.SourceSeq), v); err != nil {
			return false, err
		}
	}
	for k, v := range st.Extensions {
		if ov, ok := oldRecords[k]; ok && sameBytes(ov, v) {
			continue
		}
		if err := put(rb, []byte(k), v); err != nil {
			return false, err
		}
	}
	for k := range oldRecords {
		if _, ok := st.Extensions[k]; !ok {
			if err := del(rb, []byte(k)); err != nil {
				return false, err
			}
		}
	}
	dropText := func(b *bolt.Bucket, name string) error { changed = true; return dropTextRows(b, name) }
	if err := putTextDelta(tb, oldTexts, st.Texts, put, dropText); err != nil {
		return false, err
	}
	if !bytes.Equal(fromHeader, header) {
		if err := put(hb, keyHeader, header); err != nil {
			return false, err
		}
	}
	return changed, nil
}

// seqRange returns the first and last sourceSeq of o (1, 0 when empty).
func seqRange(o []OutboxEvent) (first, last uint64) {
	if len(o) == 0 {
		return 1, 0
	}
	return o[0].SourceSeq, o[len(o)-1].SourceSeq
}

// loadDB reads the whole state from db: the header, every stored event in
// order and every record. Values are copied out of the map. Errors wrap
// errCorruptState and never quote stored content.
func loadDB(db *bolt.DB) (st *State, header []byte, err error) {
	err = db.View(func(tx *bolt.Tx) error {
		hb, ob, rb := tx.Bucket(bucketHeader), tx.Bucket(bucketOutbox), tx.Bucket(bucketRecords)
		if hb == nil || ob == nil || rb == nil {
			return fmt.Errorf("load state store: %w: a bucket is missing", errCorruptState)
		}
		header = bytes.Clone(hb.Get(keyHeader))
		if header == nil {
			return fmt.Errorf("load state store: %w: no header", errCorruptState)
		}
		// The view is the first `"outbox":` in the header (see encode).
		plain := bytes.Replace(header, slices.Concat([]byte(`"outbox":`), outboxView), []byte(`"outbox":[]`), 1)
		var err error
		if st, err = decodeState(plain); err != nil {
			return err
		}
		if len(st.Extensions) != 0 {
			return fmt.Errorf("load state store: %w: header holds records", errCorruptState)
		}
		st.Outbox = make([]OutboxEvent, 0, ob.Stats().KeyN)
		c := ob.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var e OutboxEvent
			if len(k) != 8 || json.Unmarshal(v, &e) != nil || e.SourceSeq != binary.BigEndian.Uint64(k) {
				return fmt.Errorf("load state store: %w: outbox event %d", errCorruptState, len(st.Outbox))
			}
			var buf bytes.Buffer
			if err := json.Compact(&buf, e.Envelope); err != nil {
				return fmt.Errorf("load state store: %w: outbox envelope %d", errCorruptState, len(st.Outbox))
			}
			e.Envelope = buf.Bytes()
			st.Outbox = append(st.Outbox, e)
		}
		st.Extensions = nil
		err = rb.ForEach(func(k, v []byte) error {
			if !json.Valid(v) || knownFields()[string(k)] {
				return fmt.Errorf("load state store: %w: record %d", errCorruptState, len(st.Extensions))
			}
			if st.Extensions == nil {
				st.Extensions = map[string]json.RawMessage{}
			}
			st.Extensions[string(k)] = bytes.Clone(v)
			return nil
		})
		if err != nil {
			return err
		}
		// A store written before texts existed has no bucket.
		st.Texts, err = loadTexts(tx.Bucket(bucketTexts))
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	st.sizeOutbox()
	return st, header, nil
}

// Crash points of a write and of a migration, for test-hook builds
// (killpoint_testhooks.go): runnerd SIGKILLs itself on reaching the
// point named by PCRUNNER_TESTHOOK_STATE_KILL.
const (
	// KillStoreCommitted: the store transaction is durable; the
	// projection is not written and nothing the step enables happened.
	KillStoreCommitted = "store-committed"
	// KillProjected: the projection is renamed into place; nothing the
	// step enables (a send, a result) happened.
	KillProjected = "projected"
	// KillMigrateBuilt: a migration's (or a fresh state's) temporary
	// store is committed.
	KillMigrateBuilt = "migrate-built"
	// KillMigrateRenamed: the migrated store is renamed into place and
	// the directory synced; the projection is not written.
	KillMigrateRenamed = "migrate-renamed"
)

// killPoint is called at each crash point; a no-op unless a test-hook
// build armed it.
var killPoint = func(string) {}

// openStore opens the store and returns its state; fresh reports that
// there was no state and a fresh one was created:
//   - a leftover temporary store of an interrupted migration is removed,
//     so the migration is redone;
//   - with a store, the state is the store's; FileName is re-projected
//     if it differs (an older projection, or an old-format file beside
//     the store);
//   - with only an old-format FileName (the outbox inside), it is
//     migrated (migrate); FileName stays untouched until the store is
//     durable;
//   - with neither, a fresh state is created.
func (s *Store) openStore() (st *State, fresh bool, err error) {
	for _, n := range []string{dbTempName, dbCompactName} {
		if err := s.dir.removeName(n); err != nil {
			return nil, false, err
		}
	}
	haveDB, _, err := s.dir.statName(DBName)
	if err != nil {
		return nil, false, err
	}
	if !haveDB {
		b, err := s.dir.read(s.stateLimit() + padBlock)
		switch {
		case errors.Is(err, os.ErrNotExist):
			// Built aside and renamed like a migration, so a store under
			// DBName always has a header.
			fresh = true
			err = s.buildStore(s.fresh())
		case err == nil:
			err = s.migrate(b)
		}
		if err != nil {
			return nil, false, err
		}
	}
	if s.db, err = s.dir.openDB(DBName); err != nil {
		return nil, false, err
	}
	var header []byte
	err = guardStore(func() (err error) { st, header, err = loadDB(s.db); return err })
	if err != nil {
		return nil, false, err
	}
	s.written, s.writtenHeader = st, header
	if err := s.compactIfSparse(); err != nil {
		return nil, false, err
	}
	if err := s.reproject(st, header); err != nil {
		return nil, false, err
	}
	return st.cloneShared(), fresh, nil
}

// buildStore writes st whole into dbTempName in one transaction
// (committed and synced by bbolt) and renames it to DBName before
// syncing the directory.
func (s *Store) buildStore(st *State) error {
	header, err := s.hdr.encode(st)
	if err != nil {
		return fmt.Errorf("encode header: %w", err)
	}
	db, err := s.dir.openDB(dbTempName)
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := putDelta(tx, nil, st, nil, header)
		return err
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	killPoint(KillMigrateBuilt)
	if err := s.dir.renameSync(dbTempName, DBName); err != nil {
		return err
	}
	killPoint(KillMigrateRenamed)
	return nil
}

// reproject rewrites FileName, durably, when it does not hold header,
// st's projection.
func (s *Store) reproject(st *State, header []byte) error {
	b, err := s.dir.read(stateOverheadBytes + int64(s.cfg.MaxOutboxBytes) + padBlock)
	if err == nil && bytes.Equal(b, padded(bytes.Clone(header))) {
		s.projected, s.projectedState = header, st
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errStateTooLarge) {
		return err
	}
	if err := s.dir.write(header, true); err != nil {
		return fmt.Errorf("project state: %w", err)
	}
	s.projected, s.projectedState = header, st
	return nil
}

// migrate moves an old-format FileName (b, the outbox inside) into a new
// store without changing an event, its sourceSeq or its order: the state
// goes into dbTempName in one transaction (committed and synced by
// bbolt), which is renamed to DBName before the directory is synced.
// FileName is rewritten as the projection afterwards, by openStore.
func (s *Store) migrate(b []byte) error {
	if bytes.Contains(b, slices.Concat([]byte(`"outbox":`), outboxView)) {
		return fmt.Errorf("migrate state: %w: %s holds a projection but %s is missing", errCorruptState, FileName, DBName)
	}
	st, err := decodeState(b)
	if err != nil {
		return err
	}
	// A file this runner would refuse is not migrated: the refusal
	// leaves the directory as it was.
	probe := st.Clone()
	if probe.Schema == WarmTransitionSchema {
		if err := probe.recoverWarm(s.cfg.Identity); err != nil {
			return err
		}
	}
	if err := probe.check(s.cfg); err != nil {
		return err
	}
	if err := s.buildStore(st); err != nil {
		return fmt.Errorf("migrate state: %w", err)
	}
	s.log.Info("migrated runner state into the store", "outboxEvents", len(st.Outbox))
	return nil
}

// compactIfSparse rewrites the store into a compact copy when its file is
// more than compactRatio times its live data (and at least
// compactMinBytes): bbolt reuses freed pages but never shrinks its file.
// The copy is built under dbCompactName (committed and synced), renamed
// over DBName, the directory synced, and reopened unless the store is
// closing. Called with mu held (or during Open).
func (s *Store) compactIfSparse() error {
	if s.db == nil || s.written == nil {
		return nil
	}
	_, size, err := s.dir.statName(DBName)
	if err != nil {
		return err
	}
	live := int64(len(s.writtenHeader) + s.written.outboxBytes())
	for _, v := range s.written.Extensions {
		live += int64(len(v))
	}
	live += int64(s.written.textsBytes())
	if size < compactMinBytes || size <= compactRatio*live {
		return nil
	}
	if err := s.dir.removeName(dbCompactName); err != nil {
		return err
	}
	dst, err := s.dir.openDB(dbCompactName)
	if err != nil {
		return fmt.Errorf("compact state store: %w", err)
	}
	err = bolt.Compact(dst, s.db, compactTxBytes)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = s.dir.removeName(dbCompactName)
		return fmt.Errorf("compact state store: %w", err)
	}
	closing := s.closed
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("compact state store: %w", err)
	}
	s.db = nil
	if err := s.dir.renameSync(dbCompactName, DBName); err != nil {
		// The store is intact under DBName (a rename replaces whole).
		_ = s.dir.removeName(dbCompactName)
		if !closing {
			s.db, _ = s.dir.openDB(DBName)
		}
		return fmt.Errorf("compact state store: %w", err)
	}
	s.log.Info("compacted the state store", "bytesBefore", size, "liveBytes", live)
	if closing {
		return nil
	}
	s.db, err = s.dir.openDB(DBName)
	return err
}
