# The two commands a newcomer needs: `make setup && make demo`, and `make test`.
.PHONY: setup demo test up down soak test-deploy bench-batching bench-pipeline bench-threads bench-peer bench-precision bench-flops bench-shapes bench-redis bench-image-decode bench-image-burst record-burst-lag loadtest drills bench-admission bench-lanes bench-bulk-answers gpu-bundle gpu-check fmt lint

setup:
	bash scripts/setup.sh

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

# The local broker, Redis and the shipped models' topics, left running
# (README, "Using it"); `make down` stops what `make up` started.
up:
	bash scripts/up.sh

down:
	bash scripts/down.sh

# The chart, compose file, alert rules and dashboard only (part of `make test`).
test-deploy:
	bash scripts/test-deploy.sh

# Benchmarks (docs/benchmarks.md): commands, not timed tests.
bench-batching:
	bash -c 'source scripts/env.sh && "$$FLEET_BIN_DIR/fleet-bench" batching'

bench-pipeline:
	bash scripts/bench-pipeline.sh

# The worker's tuned threads and batch budgets against fixed thread counts 1-4
# (up to the cores), whole path, alternating rounds (docs/benchmarks.md).
bench-threads:
	bash scripts/bench-threads.sh

# The fleet against a plain Python consumer on the same texts (docs/benchmarks.md).
bench-peer:
	bash -c 'source scripts/env.sh && export FLEET_MODEL_REPO=$$PWD/models && "$$FLEET_BIN_DIR/loadtest" peer'

# bf16 (or fp16) against fp32, same process, both models (docs/benchmarks.md).
bench-precision:
	bash -c 'source scripts/env.sh && "$$FLEET_BIN_DIR/fleet-bench" precision'

# This CPU's GEMM peak and the text model's share of it per bucket (--precision, --threads).
bench-flops:
	bash -c 'source scripts/env.sh && "$$FLEET_BIN_DIR/fleet-bench" flops'

# The heap bytes the text model keeps per new batch shape, in each precision,
# with libtorch's kernel caches at their defaults, off, and bounded as a text
# worker bounds them (about 10 minutes).
bench-shapes:
	bash scripts/bench-shapes.sh

# Uses (and flushes) Redis database 15 on 127.0.0.1:6379.
bench-redis:
	bash -c 'source scripts/env.sh && "$$FLEET_BIN_DIR/fleet-bench" redis'

bench-image-decode:
	bash -c 'source scripts/env.sh && "$$FLEET_BIN_DIR/fleet-bench" image-decode'

bench-image-burst:
	bash scripts/bench-image-burst.sh

# Open-loop load (steady, then a 10x burst) against a local worker; reports in loadtest-report/.
loadtest:
	bash scripts/loadtest.sh

# Each fault drill at full length (make test runs them shortened), then the
# dependency and broken-model drills (docs/operations.md, section 8).
drills:
	bash -c 'source scripts/env.sh && export FLEET_MODEL_REPO=$$PWD/models && for d in kill-worker restart-broker redis-outage rebalance; do "$$FLEET_BIN_DIR/loadtest" drill $$d || exit 1; done'
	bash -c 'source scripts/env.sh && export FLEET_MODEL_REPO=$$PWD/models && cargo test --release -p fleet-worker --test dependency_faults --test broken_model'

# Hours of texts and images on a fleet started here, with faults on a schedule;
# the report (Markdown, plots, ledger, verdict) goes to loadtest-report/soak-<time>/
# (docs/soak.md). DURATION: how long the load lasts; SOAK_ARGS: further flags.
DURATION ?= 2h
soak:
	bash -c 'source scripts/env.sh && export FLEET_MODEL_REPO=$$PWD/models && "$$FLEET_BIN_DIR/loadtest" soak --duration $(DURATION) $(SOAK_ARGS)'

# Fixed backlog limit vs predicted-wait admission on the same burst, three
# rounds (about 8 minutes; docs/benchmarks.md).
bench-admission:
	bash -c 'source scripts/env.sh && export FLEET_MODEL_REPO=$$PWD/models FLEET_INTRA_OP_THREADS=1 && "$$FLEET_BIN_DIR/loadtest" admission'

# Interactive latency alone, behind a 50 000-text backfill on the same topic,
# and with lanes; then the backfill cancelled mid-run (docs/benchmarks.md).
# One worker, each step on a fleet of its own; the one-topic step waits for
# the backfill (minutes on 2 cores). The output is kept in loadtest-report/.
bench-lanes:
	mkdir -p loadtest-report
	bash -c 'set -o pipefail; source scripts/env.sh && export FLEET_MODEL_REPO=$$PWD/models && "$$FLEET_BIN_DIR/loadtest" lanes 2>&1 | tee loadtest-report/bench-lanes.txt'

# A real backfill of 100 000 texts sent and collected with `fleet-produce
# bulk --out` beside interactive load, against the same backfill with its
# answers in Redis, then with kills (docs/benchmarks.md; about 40 minutes on
# 2 cores). BULK_ANSWERS_ARGS: further flags (default --faults).
bench-bulk-answers:
	bash scripts/bench-bulk-answers.sh

# A burst's consumer lag, recorded and replayed through the HPA (docs/autoscaling.md).
record-burst-lag:
	bash scripts/record-burst-lag.sh

# The GPU check (docs/lifecycle.md): bundle here, run there.
gpu-bundle:
	bash scripts/gpu-bundle.sh

gpu-check:
	bash scripts/gpu-check.sh

fmt:
	cargo fmt --all

lint:
	bash -c 'source scripts/env.sh && cargo clippy --release --workspace --all-targets -- -D warnings'
