# Entry points. `make demo` runs the main job on a generated tiny model; `make test` runs every test.
# Both install what they need first (scripts/setup.sh is idempotent).
JOBS ?= $(shell nproc)
MMRT := build/release/tools/mmrt

.PHONY: setup build build-asan build-tsan build-fuzz demo test test-asan test-tsan fuzz fuzz-smoke bench clean format

setup:
	@bash scripts/setup.sh

build: setup
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

build-asan: setup
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan -j $(JOBS)

build-tsan: setup
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan -j $(JOBS)

build-fuzz: setup
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz -j $(JOBS)

demo: build
	@$(MMRT) demo

test: build
	@ctest --preset release -j $(JOBS)

test-asan: build-asan
	@ctest --preset asan -j $(JOBS)

# ThreadSanitizer over the unit tests (the engine's threads); not part of CI.
test-tsan: build-tsan
	@ctest --preset tsan -j $(JOBS)

# libFuzzer targets under ASan + UBSan (fuzz/): FUZZ_SECONDS each (default 300); the working
# corpus in build/fuzz/corpus grows from run to run. fuzz-smoke is CI's short pass (10 s each).
FUZZ_SECONDS ?= 300
fuzz: build-fuzz
	@bash fuzz/run.sh $(FUZZ_SECONDS)

fuzz-smoke: build-fuzz
	@bash fuzz/run.sh 10

bench: build
	@bash bench/run_all.sh

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf build
