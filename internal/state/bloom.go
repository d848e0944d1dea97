package state

import (
	"crypto/sha256"
	"encoding/binary"
)

const (
	// bloomBytes is the compacted-command filter size (prp.md §9.3: 4 KiB).
	bloomBytes = 4096
	// bloomHashes is the probe count; 7 keeps false positives under 1% up to
	// ~3400 evicted ids in 32768 bits (standard k = m/n·ln2 sizing).
	bloomHashes = 7
)

// bloomAdd sets id's bits, allocating the filter on first use.
func bloomAdd(filter []byte, id string) []byte {
	if len(filter) != bloomBytes {
		filter = make([]byte, bloomBytes)
	}
	for _, bit := range bloomBits(id) {
		filter[bit/8] |= 1 << (bit % 8)
	}
	return filter
}

// bloomMayContain reports whether id may have been added. A filter of the
// wrong size (absent or damaged) contains nothing.
func bloomMayContain(filter []byte, id string) bool {
	if len(filter) != bloomBytes {
		return false
	}
	for _, bit := range bloomBits(id) {
		if filter[bit/8]&(1<<(bit%8)) == 0 {
			return false
		}
	}
	return true
}

// bloomBits derives the probe positions by double hashing one SHA-256.
func bloomBits(id string) [bloomHashes]uint64 {
	sum := sha256.Sum256([]byte("paperclip.runnerd.command-filter.v1\x00" + id))
	h1 := binary.BigEndian.Uint64(sum[0:8])
	h2 := binary.BigEndian.Uint64(sum[8:16]) | 1
	var out [bloomHashes]uint64
	for i := range out {
		out[i] = (h1 + uint64(i)*h2) % (bloomBytes * 8)
	}
	return out
}
