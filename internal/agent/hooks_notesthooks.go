//go:build !testhooks

package agent

// Production build: every test hook is a no-op (see hooks_testhooks.go).

func hookBeforePublish() {}
