package sessiondir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// seqLockWait bounds the wait for another pcwrap send/stop holding the
// counter lock; each of them holds it only for a few file writes.
const seqLockWait = 5 * time.Second

// seqLockRetry is how often a contended counter lock is retried.
const seqLockRetry = 10 * time.Millisecond

// maxCounterBytes bounds the counter file read: 20 digits hold any int64.
const maxCounterBytes = 64

// errBadSeqCounter reports a .pcwrap-stdin-seq that does not hold a decimal
// number. Nothing is written to the queue while it is unreadable.
var errBadSeqCounter = errors.New("stdin sequence counter file is not a decimal number")

// seqCounter is the exclusive, flock'd hold on a session's
// .pcwrap-stdin-seq. While it is held no other pcwrap send/stop picks a
// sequence number for the session. Use Store as a Writer's Reserve hook so
// the counter moves before each file is started.
type seqCounter struct {
	f    *os.File
	last int64
}

// LockSeqCounter opens (creating, 0600) and locks the counter of
// sessionDir, refusing symlinks. The last-used number is the counter's
// value, or, when it is absent or behind, the highest numbered file still in
// stdin/ (spec §10), so a number is never handed out twice.
func LockSeqCounter(ctx context.Context, sessionDir string) (*seqCounter, error) {
	dir, err := openControlDir(sessionDir, "")
	if err != nil {
		return nil, fmt.Errorf("lock seq counter: %w", err)
	}
	defer dir.Close()
	f, err := openCounter(dir)
	if err != nil {
		return nil, fmt.Errorf("lock seq counter: %w", err)
	}
	c := &seqCounter{f: f}
	if err := c.lock(ctx); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock seq counter: %w", err)
	}
	stored, err := c.read()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("lock seq counter: %w", err)
	}
	highest, err := highestStdinSeq(sessionDir)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("lock seq counter: %w", err)
	}
	c.last = max(stored, highest)
	return c, nil
}

func (c *seqCounter) lock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, seqLockWait)
	defer cancel()
	t := time.NewTicker(seqLockRetry)
	defer t.Stop()
	for {
		ok, err := tryFlock(c.f)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for counter lock: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (c *seqCounter) read() (int64, error) {
	buf := make([]byte, maxCounterBytes)
	n, err := c.f.ReadAt(buf, 0)
	if err != nil && n == 0 && !isEOF(err) {
		return 0, fmt.Errorf("read counter: %w", err)
	}
	s := strings.TrimSpace(string(buf[:n]))
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, errBadSeqCounter
	}
	return v, nil
}

// Next returns the number the next file should get.
func (c *seqCounter) Next() int64 { return c.last + 1 }

// Store records seq as used. It fits WriterOptions.Reserve.
func (c *seqCounter) Store(seq int64) error {
	b := []byte(strconv.FormatInt(seq, 10))
	if err := c.f.Truncate(0); err != nil {
		return fmt.Errorf("store seq counter: %w", err)
	}
	if _, err := c.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("store seq counter: %w", err)
	}
	c.last = max(c.last, seq)
	return nil
}

// Close releases the lock.
func (c *seqCounter) Close() error {
	return c.f.Close() // closing the only descriptor drops the flock
}

// highestStdinSeq returns the highest sequence number among stdin/*.json.
func highestStdinSeq(sessionDir string) (int64, error) {
	dir, err := openControlDir(sessionDir, StdinDir)
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("list stdin dir: %w", err)
	}
	var hi int64
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") {
			continue
		}
		if s, ok := ParseSeq(n); ok && s > 0 {
			hi = max(hi, s)
		}
	}
	return hi, nil
}
