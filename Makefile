# Thin wrappers over scripts/ so a fresh machine needs only `make demo` and `make test`.
GO ?= go
# Per fuzz target, for `make fuzz` (any go test -fuzztime value: 10s, 1m, 500x).
FUZZTIME ?= 10s

.PHONY: build test demo bench fuzz

build:
	./scripts/build

test:
	./scripts/test

demo:
	./scripts/demo

bench:
	./scripts/bench

fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz
