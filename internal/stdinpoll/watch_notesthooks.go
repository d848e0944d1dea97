//go:build !pcwraptesthooks

package stdinpoll

import "github.com/fsnotify/fsnotify"

// Production build: the inotify test hooks are no-ops (watch_testhooks.go).

func hookNoInotify() bool { return false }

func hookLoseEvent(fsnotify.Event) bool { return false }
