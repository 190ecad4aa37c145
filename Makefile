# The two commands a newcomer needs: `make setup && make demo`, and `make test`.
.PHONY: setup demo test fmt lint

setup:
	bash scripts/setup.sh

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

fmt:
	cargo fmt --all

lint:
	bash -c 'source scripts/env.sh && cargo clippy --release --workspace --all-targets -- -D warnings'
