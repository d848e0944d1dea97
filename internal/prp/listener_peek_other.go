//go:build !linux

package prp

import "net"

// bytesPending cannot ask the kernel here; peers count as sent once read.
func bytesPending(net.Conn) bool { return false }
