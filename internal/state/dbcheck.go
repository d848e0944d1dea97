package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"runtime/debug"
)

// A damaged store file must give a clear error, never a crash: bbolt
// trusts its file. A page number out of range, a page read twice (a cycle
// in the tree) or an element past its page makes bbolt fault on its
// memory map, recurse without end, or panic on a goroutine of its own
// (the free-page scan that NoFreelistSync runs on open), none of which
// can be recovered; keys out of order make that scan panic on the
// opener's goroutine while its own goroutine still reads the transaction.
// checkStoreFile walks the file's tree the way bbolt will, from the meta
// page bbolt will choose, before bbolt sees it, and checks all of these;
// guardStore turns any panic still left into an error.

// bbolt's on-disk format (go.etcd.io/bbolt internal/common: page.go,
// meta.go, bucket.go, types.go; format version 2).
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	boltPageHeader   = 16 // id u64, flags u16, count u16, overflow u32
	boltElementSize  = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags u32, pos u32, ksize u32, vsize u32
	boltBucketHeader = 16 // root pgid u64, sequence u64
	boltMetaSumBytes = 56 // the meta's fields before its checksum
	boltBranchPage   = 0x01
	boltLeafPage     = 0x02
	boltFreelistPage = 0x10
	boltBucketLeaf   = 0x01
	boltNoFreelist   = ^uint64(0)
	boltMinPageSize  = 1024       // getPageSizeFromSecondMeta's first guess
	boltMaxPageSize  = 1024 << 14 // and its last
)

// maxDamageDetail bounds the text a recovered panic adds to the error.
const maxDamageDetail = 200

// errStoreDamaged is a store file bbolt cannot safely read. It wraps
// errCorruptState, so callers treat it like any corrupt state.
var errStoreDamaged = fmt.Errorf("runner state store is damaged: %w", errCorruptState)

func damaged(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errStoreDamaged}, args...)...)
}

// boltMeta is the part of a meta page the walk needs.
type boltMeta struct {
	pageSize           uint32
	root, freelist, hw uint64
	txid               uint64
}

// parseMeta decodes and validates a meta page's body (after the page
// header) as bbolt's Meta.Validate does: magic, version, checksum.
func parseMeta(b []byte) (boltMeta, bool) {
	if len(b) < boltMetaSumBytes+8 {
		return boltMeta{}, false
	}
	le := binary.LittleEndian
	h := fnv.New64a()
	_, _ = h.Write(b[:boltMetaSumBytes])
	if le.Uint32(b[0:]) != boltMagic || le.Uint32(b[4:]) != boltVersion || le.Uint64(b[boltMetaSumBytes:]) != h.Sum64() {
		return boltMeta{}, false
	}
	return boltMeta{pageSize: le.Uint32(b[8:]), root: le.Uint64(b[16:]), freelist: le.Uint64(b[32:]),
		hw: le.Uint64(b[40:]), txid: le.Uint64(b[48:])}, true
}

// storeWalk is one checkStoreFile run.
type storeWalk struct {
	r       io.ReaderAt
	size    int64
	ps      int64
	hw      uint64
	visited map[uint64]bool
}

// checkStoreFile reports whether the bbolt file r of size bytes is safe
// for bbolt to open and read: the meta page bbolt will use is valid,
// every page of the tree it names (buckets, inline buckets, the free
// list) lies inside the file and below the high-water mark, is of the
// right type, holds its elements inside itself, and is reached once. It
// reads each page at most once, so its time is bounded by the file's size.
func checkStoreFile(r io.ReaderAt, size int64) error {
	head := make([]byte, 0x1000)
	if n, _ := r.ReadAt(head, 0); n < boltPageHeader+boltMetaSumBytes+8 {
		return damaged("%d bytes, shorter than a meta page", size)
	}
	m0, ok0 := parseMeta(head[boltPageHeader:])
	ps := int64(m0.pageSize)
	if !ok0 {
		// bbolt then guesses the page size from where the second meta is.
		for ps = boltMinPageSize; ps <= boltMaxPageSize && ps < size-boltMinPageSize; ps <<= 1 {
			b := make([]byte, boltPageHeader+boltMetaSumBytes+8)
			if n, _ := r.ReadAt(b, ps); n == len(b) {
				if m, ok := parseMeta(b[boltPageHeader:]); ok {
					ps = int64(m.pageSize)
					break
				}
			}
		}
	}
	if ps < boltMinPageSize || ps > boltMaxPageSize || ps&(ps-1) != 0 || size < 2*ps {
		return damaged("no valid meta page (page size %d, %d bytes)", ps, size)
	}
	b1 := make([]byte, boltPageHeader+boltMetaSumBytes+8)
	if _, err := r.ReadAt(b1, ps); err != nil {
		return damaged("read the second meta page: %v", err)
	}
	m1, ok1 := parseMeta(b1[boltPageHeader:])
	// db.meta(): the valid one of the higher txid, else the other.
	a, okA, b, okB := m0, ok0, m1, ok1
	if m1.txid > m0.txid {
		a, okA, b, okB = m1, ok1, m0, ok0
	}
	m := a
	if !okA {
		if !okB {
			return damaged("both meta pages are invalid")
		}
		m = b
	}
	if int64(m.pageSize) != ps {
		return damaged("meta page size %d, pages of %d", m.pageSize, ps)
	}
	if m.hw < 2 || m.hw > uint64(size/ps) {
		return damaged("high-water mark %d beyond the file's %d pages", m.hw, size/ps)
	}
	w := &storeWalk{r: r, size: size, ps: ps, hw: m.hw, visited: map[uint64]bool{0: true, 1: true}}
	if m.freelist != boltNoFreelist {
		if err := w.freelist(m.freelist); err != nil {
			return err
		}
	}
	return w.tree(m.root)
}

// page reads page id whole (with its overflow pages), once.
func (w *storeWalk) page(id uint64) ([]byte, uint16, error) {
	if id < 2 || id >= w.hw {
		return nil, 0, damaged("page %d outside 2..%d", id, w.hw)
	}
	hdr := make([]byte, boltPageHeader)
	if _, err := w.r.ReadAt(hdr, int64(id)*w.ps); err != nil {
		return nil, 0, damaged("read page %d: %v", id, err)
	}
	le := binary.LittleEndian
	flags, overflow := le.Uint16(hdr[8:]), uint64(le.Uint32(hdr[12:]))
	if le.Uint64(hdr) != id {
		return nil, 0, damaged("page %d names itself %d", id, le.Uint64(hdr))
	}
	if id+overflow >= w.hw {
		return nil, 0, damaged("page %d overflows past the high-water mark", id)
	}
	for i := id; i <= id+overflow; i++ {
		if w.visited[i] {
			return nil, 0, damaged("page %d reached twice", i)
		}
		w.visited[i] = true
	}
	buf := make([]byte, int64(overflow+1)*w.ps)
	if _, err := w.r.ReadAt(buf, int64(id)*w.ps); err != nil {
		return nil, 0, damaged("read page %d: %v", id, err)
	}
	return buf, flags, nil
}

// freelist checks the synced free list's page: its ids fit in it.
func (w *storeWalk) freelist(id uint64) error {
	p, flags, err := w.page(id)
	if err != nil {
		return err
	}
	if flags != boltFreelistPage {
		return damaged("free list page %d has type %#x", id, flags)
	}
	n, off := uint64(binary.LittleEndian.Uint16(p[10:])), uint64(boltPageHeader)
	if n == 0xFFFF { // the count overflows into the first element
		n, off = binary.LittleEndian.Uint64(p[boltPageHeader:]), off+8
	}
	if n > (uint64(len(p))-off)/8 {
		return damaged("free list page %d holds %d ids", id, n)
	}
	return nil
}

// tree checks the bucket tree rooted at id and every bucket it holds.
func (w *storeWalk) tree(id uint64) error {
	buckets := []uint64{id}
	for len(buckets) > 0 {
		root := buckets[len(buckets)-1]
		buckets = buckets[:len(buckets)-1]
		var err error
		if _, buckets, err = w.subtree(root, nil, nil, buckets); err != nil {
			return err
		}
	}
	return nil
}

// subtree checks the pages under id, whose keys must lie in [lo, hi) (nil:
// unbounded), in the order bbolt's own scan wants them (tx_check.go
// recursivelyCheckPageKeyOrderInternal: keys ascending within a page, each
// child's keys from its branch key up to the next, above the previous
// child's), and returns the subtree's largest key and buckets with the
// roots of the buckets its leaves hold appended.
func (w *storeWalk) subtree(id uint64, lo, hi []byte, buckets []uint64) (maxKey []byte, _ []uint64, err error) {
	p, flags, err := w.page(id)
	if err != nil {
		return nil, nil, err
	}
	keys, refs, err := w.elements(p, flags, id)
	if err != nil {
		return nil, nil, err
	}
	running := lo
	for i, k := range keys {
		if (i == 0 && running != nil && bytes.Compare(running, k) > 0) || (i > 0 && bytes.Compare(running, k) >= 0) ||
			(hi != nil && bytes.Compare(k, hi) >= 0) {
			return nil, nil, damaged("page %d key %d out of order", id, i)
		}
		if flags == boltLeafPage {
			running = k
			continue
		}
		next := hi
		if i+1 < len(keys) {
			next = keys[i+1]
		}
		if running, buckets, err = w.subtree(refs[i], k, next, buckets); err != nil {
			return nil, nil, err
		}
	}
	if flags == boltLeafPage {
		return running, append(buckets, refs...), nil
	}
	return running, buckets, nil
}

// elements checks a page's elements (p is the page from its header on)
// and returns their keys and the pages they refer to: a branch page's
// children (one per key), the roots of a leaf page's buckets. Inline
// buckets are checked in place.
func (w *storeWalk) elements(p []byte, flags uint16, id uint64) (keys [][]byte, refs []uint64, err error) {
	le := binary.LittleEndian
	count := int(le.Uint16(p[10:]))
	if flags != boltBranchPage && flags != boltLeafPage {
		return nil, nil, damaged("page %d has type %#x", id, flags)
	}
	if boltPageHeader+count*boltElementSize > len(p) {
		return nil, nil, damaged("page %d holds %d elements", id, count)
	}
	for i := range count {
		at := boltPageHeader + i*boltElementSize
		e := p[at : at+boltElementSize]
		if flags == boltBranchPage {
			pos, ksize := uint64(le.Uint32(e[0:])), uint64(le.Uint32(e[4:]))
			if uint64(at)+pos+ksize > uint64(len(p)) {
				return nil, nil, damaged("page %d element %d lies outside it", id, i)
			}
			keys = append(keys, p[uint64(at)+pos:uint64(at)+pos+ksize])
			refs = append(refs, le.Uint64(e[8:]))
			continue
		}
		eflags, pos, ksize, vsize := le.Uint32(e[0:]), uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
		end := uint64(at) + pos + ksize
		if end+vsize > uint64(len(p)) {
			return nil, nil, damaged("page %d element %d lies outside it", id, i)
		}
		keys = append(keys, p[uint64(at)+pos:end])
		if eflags&boltBucketLeaf == 0 {
			continue
		}
		v := p[end : end+vsize]
		if len(v) < boltBucketHeader {
			return nil, nil, damaged("page %d bucket %d is short", id, i)
		}
		if root := le.Uint64(v); root != 0 {
			refs = append(refs, root)
			continue
		}
		// An inline bucket: its leaf page follows the bucket header.
		in := v[boltBucketHeader:]
		if len(in) < boltPageHeader {
			return nil, nil, damaged("page %d inline bucket %d is short", id, i)
		}
		if f := le.Uint16(in[8:]); f != boltLeafPage {
			return nil, nil, damaged("page %d inline bucket %d has type %#x", id, i, f)
		}
		_, sub, err := w.elements(in, boltLeafPage, id)
		if err != nil {
			return nil, nil, err
		}
		refs = append(refs, sub...)
	}
	return keys, refs, nil
}

// guardStore runs fn, which reads a store bbolt opened (or opens it),
// turning a panic into errStoreDamaged: bbolt panics on some damage
// checkStoreFile does not look for (keys out of order). A fault on the
// file's memory map panics too, instead of ending the process.
func guardStore(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			detail := fmt.Sprint(r)
			if len(detail) > maxDamageDetail {
				detail = detail[:maxDamageDetail] + "…"
			}
			err = damaged("%s", detail)
		}
	}()
	return fn()
}
