package bridge

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/pcrunner/pcrunner/internal/frame"
)

// proxyChunk is how much of its stdin the proxy forwards per message.
const proxyChunk = 64 << 10

// RunProxy plays the reference's paperclip-process-session-proxy.mjs (spec
// §9.5), the ACP client's agentCommand: it claims the session with the
// token, forwards stdin as stdin/stdinEnd lines, writes data frames to
// stdout/stderr and returns the exit status: an exit frame's code (1 if not
// a number), 1 after an error frame (its message printed) or an early close.
func RunProxy(ctx context.Context, addr, token string, stdin io.Reader, stdout, stderr io.Writer) int {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "Process session bridge failed: %v\n", err)
		return 1
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	var wmu sync.Mutex
	send := func(typ string, data []byte) error {
		m := map[string]string{"token": token, "type": typ}
		if typ == frame.MsgStdin {
			m["data"] = base64.StdEncoding.EncodeToString(data)
		}
		b, _ := json.Marshal(m)
		wmu.Lock()
		defer wmu.Unlock()
		_, err := c.Write(append(b, '\n'))
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.Close()
	if err := send("hello", nil); err != nil {
		return 1
	}
	wg.Go(func() {
		buf := make([]byte, proxyChunk)
		for {
			n, err := stdin.Read(buf)
			if n > 0 && send(frame.MsgStdin, buf[:n]) != nil {
				return
			}
			if err != nil {
				_ = send(frame.MsgStdinEnd, nil)
				return
			}
		}
	})
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), maxProxyLine)
	for sc.Scan() {
		f, err := frame.ParseFrame(sc.Bytes())
		if err != nil {
			continue
		}
		switch f.Type {
		case frame.FrameData:
			if f.Stream == frame.StreamStderr {
				stderr.Write(f.Data)
			} else {
				stdout.Write(f.Data)
			}
		case frame.FrameError:
			msg := f.Message
			if msg == "" {
				msg = "Process session bridge failed."
			}
			fmt.Fprintln(stderr, msg)
			return 1
		case frame.FrameExit:
			if f.Code != nil {
				return *f.Code
			}
			return 1
		}
	}
	return 1
}
