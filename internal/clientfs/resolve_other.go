//go:build !linux

package clientfs

import (
	"errors"
	"os"
)

// errUnsupported: runnerd's client file system is Linux-only (openat2,
// *at syscalls); elsewhere reads go through os.Root and writes fail.
var errUnsupported = errors.New("the client file system is supported on Linux only")

func openFile(root, rel string) (*os.File, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Open(rel)
}

func writeFile(root, rel string, content []byte) error { return errUnsupported }
