package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pcrunner/pcrunner/internal/quote"
)

// parseDecimal parses a plain non-negative base-10 integer: no sign, no
// 0x/0o prefixes, no underscores (strconv base 0 would read "010" as 8).
func parseDecimal(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a non-negative decimal integer")
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.New("out of range")
	}
	return n, nil
}

// msFlag is a duration flag given in decimal milliseconds. With saturate, a
// value above max becomes max instead of an error (for server-set outer
// bounds, where the reference accepts any u64).
type msFlag struct {
	dst      *time.Duration
	min, max time.Duration
	set      *bool
	saturate bool
}

func (f *msFlag) Set(s string) error {
	n, err := parseDecimal(s)
	if err != nil {
		return err
	}
	if f.saturate && n > uint64(f.max/time.Millisecond) {
		n = uint64(f.max / time.Millisecond)
	}
	if n > uint64(f.max/time.Millisecond) || time.Duration(n)*time.Millisecond < f.min {
		return fmt.Errorf("must be between %d and %d ms", f.min/time.Millisecond, f.max/time.Millisecond)
	}
	*f.dst = time.Duration(n) * time.Millisecond
	if f.set != nil {
		*f.set = true
	}
	return nil
}

func (f *msFlag) String() string {
	if f.dst == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*f.dst/time.Millisecond), 10)
}

func (f *msFlag) Type() string { return "ms" }

// bytesFlag is a byte count in decimal.
type bytesFlag struct {
	dst      *int64
	min, max int64
}

func (f *bytesFlag) Set(s string) error {
	n, err := parseDecimal(s)
	if err != nil {
		return err
	}
	if n > uint64(f.max) || int64(n) < f.min {
		return fmt.Errorf("must be between %d and %d", f.min, f.max)
	}
	*f.dst = int64(n)
	return nil
}

func (f *bytesFlag) String() string {
	if f.dst == nil {
		return "0"
	}
	return strconv.FormatInt(*f.dst, 10)
}

func (f *bytesFlag) Type() string { return "bytes" }

// uintFlag is a bounded unsigned decimal.
type uintFlag struct {
	dst *uint64
	max uint64
}

func (f *uintFlag) Set(s string) error {
	n, err := parseDecimal(s)
	if err != nil {
		return err
	}
	if n > f.max {
		return fmt.Errorf("must be at most %d", f.max)
	}
	*f.dst = n
	return nil
}

func (f *uintFlag) String() string {
	if f.dst == nil {
		return "0"
	}
	return strconv.FormatUint(*f.dst, 10)
}

func (f *uintFlag) Type() string { return "uint" }

// intFlag is a bounded signed decimal.
type intFlag struct {
	dst      *int64
	min, max int64
}

func (f *intFlag) Set(s string) error {
	neg := strings.HasPrefix(s, "-")
	n, err := parseDecimal(strings.TrimPrefix(s, "-"))
	if err != nil {
		return errors.New("not a decimal integer")
	}
	if n > uint64(f.max) {
		return fmt.Errorf("must be between %d and %d", f.min, f.max)
	}
	v := int64(n)
	if neg {
		v = -v
	}
	if v < f.min {
		return fmt.Errorf("must be between %d and %d", f.min, f.max)
	}
	*f.dst = v
	return nil
}

func (f *intFlag) String() string {
	if f.dst == nil {
		return "0"
	}
	return strconv.FormatInt(*f.dst, 10)
}

func (f *intFlag) Type() string { return "int" }

// presenceFlag is a switch that takes no value.
type presenceFlag struct{ dst *bool }

func (f *presenceFlag) Set(s string) error {
	if s != "true" {
		return errors.New("takes no value")
	}
	*f.dst = true
	return nil
}

func (f *presenceFlag) String() string { return "false" }
func (f *presenceFlag) Type() string   { return "" }

// agentTimeouts collects --session-open-cold-timeout-agent AGENT=MS.
type agentTimeouts struct {
	entries []agentTimeout
}

type agentTimeout struct {
	agent   string
	timeout time.Duration
}

func (a *agentTimeouts) Set(s string) error {
	agent, ms, ok := strings.Cut(s, "=")
	if !ok {
		return errors.New("want AGENT=MS")
	}
	if agent == "" || len(agent) > maxAgentNameBytes {
		return fmt.Errorf("agent name must be 1-%d bytes", maxAgentNameBytes)
	}
	for i := 0; i < len(agent); i++ {
		ch := agent[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.') {
			return errors.New("agent name may hold only a-z, 0-9, '-', '_' and '.'")
		}
	}
	var d time.Duration
	if err := (&msFlag{dst: &d, min: time.Millisecond, max: maxDurationFlag}).Set(ms); err != nil {
		return err
	}
	for _, e := range a.entries {
		if e.agent == agent {
			return fmt.Errorf("agent %s given more than once", quote.Text(agent))
		}
	}
	if len(a.entries) >= maxColdTimeoutAgents {
		return fmt.Errorf("more than %d agents", maxColdTimeoutAgents)
	}
	a.entries = append(a.entries, agentTimeout{agent, d})
	return nil
}

func (a *agentTimeouts) String() string {
	parts := make([]string, 0, len(a.entries))
	for _, e := range a.entries {
		parts = append(parts, e.agent+"="+strconv.FormatInt(int64(e.timeout/time.Millisecond), 10))
	}
	return strings.Join(parts, ",")
}

func (a *agentTimeouts) Type() string { return "AGENT=MS" }
