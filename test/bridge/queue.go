package bridge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"path"
	"strings"

	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// uploadSlice is the base64 bytes appended per exec (spec §9.2, §11:
// 32 KiB of base64 per exec, under the Linux per-string exec limit).
const uploadSlice = 32 << 10

// bridgeEnv is the env every control command carries (spec §9.2).
var bridgeEnv = map[string]string{"PAPERCLIP_SANDBOX_EXEC_CHANNEL": "bridge"}

// Queue is the reference's sandbox queue client (spec §9.2): every file
// operation is a sh -c control command through the Runner.
type Queue struct {
	Runner Runner
}

func (q Queue) control(ctx context.Context, script string) (Result, error) {
	res, err := q.Runner.Run(ctx, Exec{Script: script, Env: bridgeEnv, BypassSession: true, Timeout: controlCap})
	if err != nil {
		return res, err
	}
	if res.ExitCode != 0 {
		return res, fmt.Errorf("control command exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return res, nil
}

// WriteTextFile uploads content to final: base64 slices appended to a
// temporary sibling, decoded into a second sibling, then mv onto final. The
// final name is never a redirect target (issue #10874).
func (q Queue) WriteTextFile(ctx context.Context, final, content string) (err error) {
	id := newUUID()
	tmp := final + "." + id + ".paperclip-upload.b64"
	decoded := final + "." + id + ".paperclip-upload.decoded"
	defer func() {
		if err != nil {
			// Fire and forget, as the reference does.
			go q.Runner.Run(context.WithoutCancel(ctx), Exec{Script: "rm -f " + shq(tmp) + " " + shq(decoded),
				Env: bridgeEnv, BypassSession: true, Timeout: controlCap})
		}
	}()
	if _, err := q.control(ctx, "mkdir -p "+shq(path.Dir(final))+" && rm -f "+shq(tmp)+" "+shq(decoded)+" && : > "+shq(tmp)); err != nil {
		return fmt.Errorf("write text file: %w", err)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(content))
	for len(b64) > 0 {
		n := min(uploadSlice, len(b64))
		if _, err := q.control(ctx, "printf '%s' "+shq(b64[:n])+" >> "+shq(tmp)); err != nil {
			return fmt.Errorf("write text file: %w", err)
		}
		b64 = b64[n:]
	}
	if _, err := q.control(ctx, "base64 -d < "+shq(tmp)+" > "+shq(decoded)+" && mv "+shq(decoded)+" "+shq(final)+" && rm -f "+shq(tmp)); err != nil {
		return fmt.Errorf("write text file: %w", err)
	}
	return nil
}

// ListJSONFiles prints the base names of the regular *.json files of dir.
func (q Queue) ListJSONFiles(ctx context.Context, dir string) ([]string, error) {
	res, err := q.control(ctx, "for f in "+shq(dir)+"/*.json; do if [ -f \"$f\" ]; then basename \"$f\"; fi; done")
	if err != nil {
		return nil, fmt.Errorf("list json files: %w", err)
	}
	var names []string
	for _, l := range strings.Split(string(res.Stdout), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			names = append(names, l)
		}
	}
	return names, nil
}

// ReadTextFile reads a file as base64 through the exec channel.
func (q Queue) ReadTextFile(ctx context.Context, p string) ([]byte, error) {
	res, err := q.control(ctx, "base64 < "+shq(p))
	if err != nil {
		return nil, fmt.Errorf("read text file: %w", err)
	}
	b, err := base64.StdEncoding.DecodeString(string(bytes.Join(bytes.Fields(res.Stdout), nil)))
	if err != nil {
		return nil, fmt.Errorf("read text file: decode base64: %w", err)
	}
	return b, nil
}

// Remove is rm -rf.
func (q Queue) Remove(ctx context.Context, p string) error {
	if _, err := q.control(ctx, "rm -rf "+shq(p)); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	return nil
}

// shellFS is the host's view of events/ for the tolerant reader.
type shellFS struct {
	ctx context.Context
	q   Queue
	dir string
}

func (s shellFS) List() ([]string, error)          { return s.q.ListJSONFiles(s.ctx, s.dir) }
func (s shellFS) Read(name string) ([]byte, error) { return s.q.ReadTextFile(s.ctx, s.dir+"/"+name) }
func (s shellFS) Remove(name string) error         { return s.q.Remove(s.ctx, s.dir+"/"+name) }

var _ sessiondir.EventFS = shellFS{}

// newUUID returns a random (v4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
