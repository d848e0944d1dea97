package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Side files hold what a run fixes once and may be megabytes large: the
// tool catalog, the instructions and the runtime context (tools.md §1,
// storage). Keeping them out of runner-state.json means no state write on
// the agent path rewrites them; the state keeps only their names.
const (
	// SideDir is the directory of side files beside FileName.
	SideDir = "side"
	// sidePrefix starts every side file's name: the content address.
	sidePrefix = "sha256:"
)

// SideName is the content address of data: "sha256:" + hex(sha256(data)).
func SideName(data []byte) string {
	sum := sha256.Sum256(data)
	return sidePrefix + hex.EncodeToString(sum[:])
}

// sidePath maps a side name to its file under dir, refusing a name that is
// not a content address (so a tampered state cannot point outside SideDir).
func sidePath(dir, name string) (string, error) {
	h, ok := strings.CutPrefix(name, sidePrefix)
	if !ok || len(h) != 2*sha256.Size {
		return "", errors.New("side file name is not a sha256 content address")
	}
	if _, err := hex.DecodeString(h); err != nil || strings.ToLower(h) != h {
		return "", errors.New("side file name is not a sha256 content address")
	}
	return filepath.Join(dir, SideDir, h+".json"), nil
}

// WriteSide stores data as the write-once side file named by its content
// address under the state directory dir (0700 directory, 0600 file, temp
// file + fsync + rename + directory fsync) and returns the name. A file
// already present with that name is kept: its name proves its content.
func WriteSide(dir string, data []byte) (string, error) {
	name := SideName(data)
	path, _ := sidePath(dir, name)
	if _, err := os.Lstat(path); err == nil {
		return name, nil
	}
	sd := filepath.Join(dir, SideDir)
	if err := os.Mkdir(sd, dirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("write side file: %w", err)
	}
	if fi, err := os.Lstat(sd); err != nil || !fi.IsDir() {
		return "", errors.New("write side file: side directory is not a directory")
	}
	f, err := os.CreateTemp(sd, ".side-*")
	if err != nil {
		return "", fmt.Errorf("write side file: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if err := f.Chmod(fileMode); err != nil {
		f.Close()
		return "", fmt.Errorf("write side file: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", fmt.Errorf("write side file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("write side file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write side file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write side file: %w", err)
	}
	if err := syncDir(sd); err != nil {
		return "", fmt.Errorf("write side file: %w", err)
	}
	return name, nil
}

// ReadSide reads the side file name from the state directory dir, at most
// max bytes, and checks that its content still has that address: a file
// changed on disk is an error, never a different catalog.
func ReadSide(dir, name string, max int64) ([]byte, error) {
	path, err := sidePath(dir, name)
	if err != nil {
		return nil, fmt.Errorf("read side file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("read side file: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(f, max+1)); err != nil {
		return nil, fmt.Errorf("read side file: %w", err)
	}
	if int64(buf.Len()) > max {
		return nil, fmt.Errorf("read side file: larger than %d bytes", max)
	}
	if SideName(buf.Bytes()) != name {
		return nil, errors.New("read side file: content does not match its name")
	}
	return buf.Bytes(), nil
}

// syncDir fsyncs the directory at path so a rename in it is durable.
func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
