# Thin wrappers over scripts/ so a fresh machine needs only `make demo` and `make test`.
GO ?= go

.PHONY: build test demo bench fuzz

build:
	./scripts/build

test:
	./scripts/test

demo:
	./scripts/demo

bench:
	./scripts/bench
