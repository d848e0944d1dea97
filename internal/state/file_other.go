//go:build !linux

package state

import (
	"github.com/pcrunner/pcrunner/internal/clock"

	"errors"
	"fmt"
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

func (d *dirHandle) close()                           {}
func (d *dirHandle) read(limit int64) ([]byte, error) { return nil, errors.ErrUnsupported }
func (d *dirHandle) write(b []byte) error             { return errors.ErrUnsupported }
func (d *dirHandle) removeStaleTemps() error          { return errors.ErrUnsupported }

func openDirReadOnly(path string) (*dirHandle, error) {
	return nil, fmt.Errorf("open state dir: %w", errors.ErrUnsupported)
}

func (d *dirHandle) readConsistent(limit int64) ([]byte, error) { return nil, errors.ErrUnsupported }

const maxInspectBytes = 0
