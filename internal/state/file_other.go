//go:build !linux

package state

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/pcrunner/pcrunner/internal/clock"
)

// The state file discipline (openat, O_NOFOLLOW, renameat, directory fsync)
// is implemented for Linux, where runnerd runs.

const tempPrefix = "." + FileName + ".tmp-"

// padBlock: no padding where there is no file discipline.
const padBlock = 0

type dirHandle struct {
	path  string
	clk   clock.Clock
	fault func(op string) error
}

func openDir(path string) (*dirHandle, error) {
	return nil, fmt.Errorf("open state dir: %w", errors.ErrUnsupported)
}

func (d *dirHandle) close()                             {}
func (d *dirHandle) read(limit int64) ([]byte, error)   { return nil, errors.ErrUnsupported }
func (d *dirHandle) write(b []byte, syncDir bool) error { return errors.ErrUnsupported }
func (d *dirHandle) removeStaleTemps() error            { return errors.ErrUnsupported }

func openDirReadOnly(path string) (*dirHandle, error) {
	return nil, fmt.Errorf("open state dir: %w", errors.ErrUnsupported)
}

func (d *dirHandle) readConsistent(limit int64) ([]byte, error) { return nil, errors.ErrUnsupported }

const maxInspectBytes = 0

func (d *dirHandle) injected(op string) error { return nil }

func (d *dirHandle) statName(name string) (bool, int64, error) {
	return false, 0, errors.ErrUnsupported
}

func (d *dirHandle) openDB(name string) (*bolt.DB, error) { return nil, errors.ErrUnsupported }

func (d *dirHandle) renameSync(from, to string) error { return errors.ErrUnsupported }

func (d *dirHandle) removeName(name string) error { return errors.ErrUnsupported }

func (d *dirHandle) openDBSnapshot(limit int64) (*bolt.DB, int64, error) {
	return nil, 0, errors.ErrUnsupported
}

var errStoreLocked = errors.New("the state store is held by another runnerd")

func padded(b []byte) []byte { return b }
