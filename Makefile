# Thin wrappers over scripts/ so a fresh machine needs only `make demo` and `make test`.
GO ?= go
# Per fuzz target, for `make fuzz` (any go test -fuzztime value: 10s, 1m, 500x);
# all targets at 10s take about 15 to 20 minutes on two cores.
FUZZTIME ?= 10s

.PHONY: build test demo demo-warm bench fuzz image-test containment chaos

build:
	./scripts/build

test:
	./scripts/test

# WARM=1 adds the warm-rotation part (run.attach, prp.md §9.5).
demo:
	./scripts/demo
	@if [ -n "$(WARM)" ]; then ./scripts/demo-warm; fi

demo-warm:
	./scripts/demo-warm

# MET/MISSED per target; BENCH_STRICT=1 makes a missed target fail.
bench:
	./scripts/bench

fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz

# Orphan counts and terminate times of pcwrap's containment, N runs per case.
N ?= 100
containment:
	N=$(N) ./scripts/containment

# Builds Dockerfile.sandbox with podman offline and runs it (needs root; minutes).
image-test:
	./scripts/image-test

# A long chaos wave in the background (test/chaos): N runs over SEEDS, up to
# the CPU count at once (PAR); prints where its output and summary go.
SEEDS ?= a b c
chaos:
	BACKGROUND=1 N=$(N) SEEDS="$(SEEDS)" $(if $(PAR),PAR=$(PAR)) ./scripts/chaos
