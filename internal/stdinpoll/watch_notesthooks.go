//go:build !testhooks

package stdinpoll

// Production build: the inotify test hooks are no-ops (watch_testhooks.go).

func hookNoInotify() bool { return false }

func hookLoseEvent() bool { return false }
