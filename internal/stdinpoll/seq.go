package stdinpoll

import (
	"math"
	"strconv"
	"strings"

	"github.com/pcrunner/pcrunner/internal/sessiondir"
)

// seqOf returns a queue file name's sequence number as the reference's
// parseInt(name, 10) gives it: a JavaScript number, i.e. a float64 (spec
// §6.2). ok is false for NaN (no leading integer). The reader keeps
// expectedSeq in the same type and computes seq+1 as JavaScript does, so
// a hostile name with 20 or more digits orders exactly as in the
// reference (1e20 < 1e21, and 1e20+1 == 1e20) instead of saturating an
// int64, whose +1 wrapped the counter to -2^63 and stalled the queue
// behind a bogus gap. Every name up to 2^53 is exact, so the 12-digit
// names of §6.2 are unchanged.
//
// sessiondir.ParseSeq decides whether the name is numeric (white space,
// sign, digits); its int64 value is exact below 2^63 and converts to the
// same correctly rounded float64 parseInt gives. Only a saturated value
// is re-read from the digit run: white space and a sign hold no ASCII
// digit, so the first run of digits is parseInt's.
func seqOf(name string) (seq float64, ok bool) {
	v, ok := sessiondir.ParseSeq(name)
	if !ok {
		return 0, false
	}
	if v != math.MaxInt64 && v != math.MinInt64 {
		return float64(v), true
	}
	start := strings.IndexAny(name, "0123456789")
	end := start
	for end < len(name) && name[end] >= '0' && name[end] <= '9' {
		end++
	}
	f, _ := strconv.ParseFloat(name[start:end], 64) // ±Inf past 1.8e308, as parseInt
	if start > 0 && name[start-1] == '-' {
		f = -f
	}
	return f, true
}

// jsNumber formats an integral float64 as JavaScript's String(n) does,
// for the gap message: plain digits below 1e21, exponent form above.
func jsNumber(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.Abs(f) < 1e21:
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
