package sessiondir

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkEventFile: one 64 KiB data frame's event file published and
// consumed (created filled or by name, renamed, unlinked), in $TMPDIR:
// the cost of the O_TMPFILE path against the named create where the
// directory lock is not contended.
func BenchmarkEventFile(b *testing.B) {
	body := bytes.Repeat([]byte("A"), 87<<10)
	for _, c := range []struct {
		name  string
		named bool
	}{{"filled", false}, {"named", true}} {
		b.Run(c.name, func(b *testing.B) {
			dir, err := os.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer dir.Close()
			dfd := int(dir.Fd())
			noTmpfile.Store(c.named)
			defer noTmpfile.Store(false)
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := writeEventFile(dfd, 1, body); err != nil {
					b.Fatal(err)
				}
				if err := unix.Unlinkat(dfd, SeqName(1), 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
