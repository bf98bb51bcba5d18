# mixprec - the two commands: `make demo` and `make test`. See README.md.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= 2
PREFIX     ?= /usr/local
CMAKE_ARGS ?=
M          := $(BUILD)/mixprec

.PHONY: all deps build build-asan test test-long demo bench install clean

all: build

deps:
	@scripts/deps.sh build

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DMP_WERROR=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The same sources with AddressSanitizer + UndefinedBehaviorSanitizer; its tests
# run on a fixed sample of inputs (--quick) instead of all 2^32.
build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMP_WERROR=ON -DMP_SANITIZE=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

test: build build-asan
	ctest --test-dir $(BUILD) --output-on-failure
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir $(ASAN_BUILD) --output-on-failure

# Everything on all 2^32 inputs, fp8 included (make test does fp8 on a 2^28 slice).
test-long: build
	$(BUILD)/tests/test_format --long
	$(BUILD)/tests/test_convert

demo: build
	@echo "== mixprec formats: the formats, and what gradient-sized values become =="
	@$(M) formats
	@echo
	@echo "== mixprec cast: one gradient, 3.7e-6, in fp16 and bf16; then scaled by 2^16 =="
	@$(M) cast --to fp16 3.7e-6 3.7e-9 2.424832e-4
	@$(M) cast --to bf16 3.7e-6 3.7e-9
	@echo
	@echo "3.7e-9 vanishes in fp16; multiplied by a loss scale of 65536 it is 2.42e-4,"
	@echo "a normal fp16 number, and dividing by 65536 afterwards (in fp32) is exact."

# Peers come from Debian (numpy, PyTorch); /usr/bin/python3 is Debian's Python.
bench: build
	@scripts/deps.sh bench
	/usr/bin/python3 bench/crosscheck.py --lib $(BUILD)/libmixprec.so
	/usr/bin/python3 bench/crosscheck_optim.py --lib $(BUILD)/libmixprec.so
	/usr/bin/python3 bench/crosscheck_train.py --mixprec $(M)
	/usr/bin/python3 bench/compare.py --mixprec $(M)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
