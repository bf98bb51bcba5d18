# mixprec - the two commands: `make demo` and `make test`. See README.md.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= 2
PREFIX     ?= /usr/local
CMAKE_ARGS ?=
M          := $(BUILD)/mixprec

.PHONY: all deps deps-test build build-asan test test-long test-inputs test-mpi-long test-mpi-asan crosscheck-fp8 check check-stability check-budget check-layers check-layers-quick check-gpt check-fp8 check-package check-torch check-clang fuzz demo bench bench-dist crosscheck-optim install clean

all: build

# What compiling needs; the tests' packages (Python, torch, Chromium, OpenMPI,
# the datasets) come with `make test` (scripts/deps.sh says which).
deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DMP_WERROR=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The same sources with AddressSanitizer + UndefinedBehaviorSanitizer, at -O1
# (CMakeLists.txt); its tests run on a fixed sample of inputs (--quick).
build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMP_WERROR=ON -DMP_SANITIZE=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

# Twice JOBS tests at a time: much of the time in the shell tests is spent
# waiting on the processes they start (on 2 Zen 3 cores the plain tests take
# 104 s at -j 4 against 133 s at -j 2).
TEST_JOBS ?= $(shell echo $$(( $(JOBS) * 2 )))
# The sanitizers' options for every ASan + UBSan run. intercept_tls_get_addr=0:
# up to GCC 13 and LLVM 16 the runtime's __tls_get_addr interceptor takes a
# dynamic TLS block that malloc placed 16 bytes past a 4 KiB boundary for one
# with glibc 2.19's header and records the two words before it as the block;
# LeakSanitizer's exit-time check then reads that garbage range and dies
# ("Tracer caught signal 11") on an allocation layout only some machines see.
SAN_ENV = ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1
test: deps-test build build-asan
	scripts/test_example.sh $(BUILD)
	ctest --test-dir $(BUILD) --output-on-failure -j $(TEST_JOBS)
	$(SAN_ENV) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(TEST_JOBS)

# What make test samples, whole: every format and every SIMD path on all 2^32
# fp32 inputs (make test takes a 2^26 + 2^20 slice), the softmax's e^x on every fp32
# input in [-104, 0] on every path (make test: every 127th), every tensor of every kind of
# checkpoint damaged and a socket as every input (tests/test_inputs.sh), the data-parallel test's longer
# comparisons (SGD, the benchmark GPT over 50 steps, 3 and 4 ranks), and the
# data-parallel test under ASan + UBSan. .ci/run runs it; 430 s on 2 Zen 3 cores.
test-long: deps-test build build-asan
	$(BUILD)/tests/test_format --long
	$(BUILD)/tests/test_convert --long
	$(BUILD)/tests/test_fp8_scale --long
	$(BUILD)/tests/test_ops --long
	@$(MAKE) --no-print-directory -j 3 --output-sync=target test-inputs test-mpi-long test-mpi-asan

# test-long's three process-bound parts side by side (each mostly one process
# at a time: on 2 Zen 3 cores 66, 59 and 94 s one after another, 250 CPU-s).
test-inputs:
	MIXPREC=$$PWD/$(M) bash tests/test_inputs.sh
test-mpi-long test-mpi-asan:
	@if [ -x "$$(command -v mpirun)" ] && $(M) --version | grep -q 'MPI: '; then \
	    if [ $@ = test-mpi-long ]; then \
	        echo "MIXPREC_LONG=1 tests/test_mpi.sh"; \
	        MIXPREC=$$PWD/$(BUILD)/mixprec-fault MIXPREC_LONG=1 bash tests/test_mpi.sh; \
	    else \
	        echo "tests/test_mpi.sh under ASan + UBSan"; \
	        $(SAN_ENV) MIXPREC=$$PWD/$(ASAN_BUILD)/mixprec-fault bash tests/test_mpi.sh; \
	    fi; \
	fi

# The GPT at the accuracy budget: fp32, fp16-dynamic, bf16, bf16-pure and bf16
# with 8-bit optimizer state, Kahan-compensated weights and both, trained two
# at a time; the accuracy, sample and bytes-per-parameter targets asserted
# (docs/TRAINING.md); about 24 minutes on 2 Zen 3 cores.
check-gpt: deps-test build
	CHECK_ALSO= scripts/check_gpt.sh $(M) $(BUILD)/check-gpt

# The fp8/fp4 recipes on the GPT at the same budget: bf16, fp8-delayed,
# fp8-current, mxfp8 and nvfp4 two at a time, their accuracy targets asserted
# (docs/TRAINING.md); about 5 minutes on 2 Zen 5 cores, 20 on Zen 3.
check-fp8: deps-test build
	CHECK_FROM= scripts/check_fp8.sh $(M) $(BUILD)/check-fp8

# The Python package as a user installs it: pip install of the checkout and of
# its sdist into fresh virtual environments, the package's tests against each,
# and examples/torch_monitor.py (about 2 minutes; pip fetches scikit-build-core
# from PyPI).
check-package: deps-test
	scripts/check_package.sh

# The Python package's tests that need torch 2.x (the monitor's fp16 autocast and
# GradScaler on the CPU, torch.compile, the Lightning, Hugging Face and TensorBoard
# integrations), with every other test, in bench/.venv: scripts/bench_venv.sh makes
# it (PyPI's torch and those libraries, about 3 GB: the download counts in this
# target's time); a test skipped there for want of torch 2.x fails. Then
# examples/torch_monitor.py in fp16 with a GradScaler. make test runs the rest with
# Debian's torch 1.13 and names what waited. About 1 minute once bench/.venv exists.
check-torch: deps-test build
	@scripts/bench_venv.sh
	MIXPREC=$$PWD/$(M) MIXPREC_LIB=$$PWD/$(BUILD)/libmixprec.so tests/test_python.sh bench/.venv/bin/python
	PYTHONPATH=python MIXPREC_LIB=$(BUILD)/libmixprec.so OMP_NUM_THREADS=1 bench/.venv/bin/python \
	    examples/torch_monitor.py --steps 30 --out $(BUILD)/check-torch > $(BUILD)/check-torch.txt
	@grep -q '^trained 30 steps in fp16 autocast' $(BUILD)/check-torch.txt && \
	    grep -q '^wrote .*report.html' $(BUILD)/check-torch.txt || { cat $(BUILD)/check-torch.txt; exit 1; }

# clang builds (-Werror) and their tests, plain and with ASan + UBSan; the
# threaded tests and short training runs under ThreadSanitizer with LLVM's
# libomp and its Archer tool (7-8 minutes from clean builds on 2 cores of an
# Intel Xeon VM).
check-clang:
	@scripts/deps.sh clang
	scripts/check_clang.sh

# Each parser's libFuzzer harness (fuzz/, docs/FUZZING.md) for FUZZ_SECONDS
# (60) each, built with clang under ASan + UBSan in build-fuzz (about 9
# minutes). make test replays their corpora.
fuzz:
	@scripts/deps.sh clang
	scripts/fuzz.sh

# The longer checks .ci/run runs after `make test`.
check: check-package check-stability check-torch check-budget check-clang

# The lean settings against bf16 on short runs where a blow-up shows, with
# bf16 from perturbed initial weights as the chaos floor (docs/TRAINING.md,
# "Loss spikes and the stability sweep"); 2m22s on 2 quiet Zen 3 cores.
check-stability: deps-test build
	scripts/check_stability.sh $(M) $(BUILD)/check-stability

# Which Linear layers of the GPT can take each recipe: mixprec advise at the
# accuracy budget per recipe and the NVFP4 paper's rule, the table of
# docs/TRAINING.md ("Which layers can take a recipe") into
# $(BUILD)/check-layers/table.md; 2 x (16 + 3) runs of 1000 steps per recipe.
check-layers: deps-test build
	scripts/check_layers.sh $(M) $(BUILD)/check-layers

# The same for nvfp4 alone on the demo's GPT (gpt:2-4-64-64, 400 steps): what
# CI runs, inside check-budget.
check-layers-quick: deps-test build
	LAYERS_QUICK=1 scripts/check_layers.sh $(M) $(BUILD)/check-layers-quick

# check-gpt's modes and check-fp8's recipes trained together, bf16 once for
# both, two runs at a time with one thread each (scripts/budget.sh), and
# check-layers-quick as one more job of the same pool, with one thread, in
# the core that the budget's last runs would leave idle; 24m33s on 2 quiet
# Zen 3 cores without check-layers-quick.
check-budget: deps-test build
	BUDGET_BESIDE='LAYERS_QUICK=1 scripts/check_layers.sh $(M) $(BUILD)/check-layers-quick' \
	    CHECK_ALSO=fp8-delayed,fp8-current,mxfp8,nvfp4 scripts/check_gpt.sh $(M) $(BUILD)/check-budget
	CHECK_FROM=$(BUILD)/check-budget scripts/check_fp8.sh $(M)

# The main job: fp32, fp16, fp16 + dynamic loss scaling and bf16 side by side on
# Fashion-MNIST (about 2 minutes on 2 cores); the report is mixprec-demo/report.html.
demo: build
	@scripts/deps.sh demo
	@$(M) demo --out mixprec-demo

# Peers come from Debian (numpy, PyTorch); /usr/bin/python3 is Debian's Python.
bench: build
	@scripts/deps.sh bench
	/usr/bin/python3 bench/crosscheck.py --lib $(BUILD)/libmixprec.so
	/usr/bin/python3 bench/crosscheck_optim.py --lib $(BUILD)/libmixprec.so
	/usr/bin/python3 bench/crosscheck_train.py --mixprec $(M)
	/usr/bin/python3 bench/crosscheck_gpt.py --mixprec $(M)
	/usr/bin/python3 bench/compare.py --mixprec $(M)
	PYTHONPATH=python MIXPREC_LIB=$(BUILD)/libmixprec.so /usr/bin/python3 bench/monitor_overhead.py gpt:6-6-384-256 16 5 2 bf16

# Data-parallel speed (docs/DISTRIBUTED.md): 2 ranks x 1 thread against 1
# process x 2 threads per --allreduce format, the all-reduce alone (mixprec
# bench allreduce) and the N-rank cost model; about 3 minutes. Needs MPI.
bench-dist: build
	/usr/bin/python3 bench/dist.py --mixprec $(M) --json bench/out/dist.json

# The fp8/fp4 formats and quantizers against their peers (ml_dtypes, torchao),
# in bench/.venv (scripts/bench_venv.sh makes it): a few minutes.
crosscheck-fp8: deps-test build
	@scripts/bench_venv.sh
	bench/.venv/bin/python bench/crosscheck_formats.py --lib $(BUILD)/libmixprec.so
	bench/.venv/bin/python bench/crosscheck_mx.py --lib $(BUILD)/libmixprec.so
	bench/.venv/bin/python bench/crosscheck_fp8.py --lib $(BUILD)/libmixprec.so

# The optimizer's state formats and weights without a master copy against
# torchao (AdamW8bit, AdamW4bit, AdamWFp8; _AdamW's bf16 stochastic rounding)
# and torch-optimi (Kahan summation), in bench/.venv: a few minutes.
crosscheck-optim: build
	@scripts/bench_venv.sh
	bench/.venv/bin/python bench/crosscheck_states.py --lib $(BUILD)/libmixprec.so
	bench/.venv/bin/python bench/crosscheck_weights.py --lib $(BUILD)/libmixprec.so

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-clang build-clang-asan build-tsan build-fuzz
