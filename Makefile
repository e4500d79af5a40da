# The README's two commands are `make demo` and `make test`; both set everything up from a fresh
# clone: virtual environment, pinned dependencies, system packages, the native build.
PY ?= python3
VENV := .venv
PYTHON := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-installed
BUILD_LOCK := $(VENV)/.build-lock
PYTEST_ARGS ?=

.PHONY: all demo test build test-runtime test-python bench format lint clean system-deps

all: build

$(PYTHON):
	$(PY) -m venv $(VENV)

$(DEPS_STAMP): requirements/test.txt | $(PYTHON)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -r requirements/test.txt
	touch $@

# GoogleTest for the runtime's unit tests comes from Debian (no downloads at build time).
system-deps:
	@if [ ! -f /usr/include/gtest/gtest.h ]; then \
	  echo "installing libgtest-dev (GoogleTest) with apt-get"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgtest-dev) \
	    || { echo "could not install libgtest-dev; install GoogleTest and rerun" >&2; exit 1; }; \
	fi

# --no-build-isolation: build against the torch installed above, never a freshly resolved one.
build: $(DEPS_STAMP)
	flock $(BUILD_LOCK) $(PYTHON) -m pip install -q --no-build-isolation --no-deps -e .

test-runtime: system-deps $(DEPS_STAMP)
	$(VENV)/bin/cmake -S . -B build/runtime-tests -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) \
	  -DTORCH_NEURONX_BUILD_EXTENSION=OFF -DNRTSIM_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release > /dev/null
	$(VENV)/bin/cmake --build build/runtime-tests
	$(VENV)/bin/ctest --test-dir build/runtime-tests --output-on-failure

test-python: build
	$(PYTHON) -m pytest tests $(PYTEST_ARGS)

test: test-runtime test-python

# The full OpInfo parity suite: every sample of every OpInfo, float32 and bfloat16, forward and
# backward (`make test` runs its documented subset; see docs/opinfo.md).
.PHONY: opinfo
opinfo: build
	TORCH_NEURONX_OPINFO=full $(PYTHON) -m pytest tests/opinfo $(PYTEST_ARGS)

# The full ModuleInfo parity suite: every eval-mode sample of every module in module_db, float32
# and bfloat16, forward and backward (`make test` runs its documented subset; see
# docs/moduleinfo.md).
.PHONY: moduleinfo
moduleinfo: build
	TORCH_NEURONX_MODULEINFO=full $(PYTHON) -m pytest tests/moduleinfo $(PYTEST_ARGS)

# PyTorch's device-generic suites (test_binary_ufuncs.py, test_view_ops.py, test_nn.py's
# TestNNDeviceType), run for neuron and for the CPU from a copy in build/conformance and compared
# per test against tests/conformance/known_failures.txt (docs/conformance.md). The files are not
# in this repository: PYTORCH_TESTS names their folder. About two hours on two cores; `make test`
# runs a subset.
PYTORCH_TESTS ?= ../shared/pytorch-tests
.PHONY: conformance
conformance: build
	PYTORCH_TESTS=$(abspath $(PYTORCH_TESTS)) $(PYTHON) tests/conformance/suites.py $(CONFORMANCE_ARGS)

# The layout and aliasing fuzzer's long run: every native op, FUZZ_EXAMPLES examples each (default
# 100), every FUZZ_COMPILE_EVERY-th op compiled too, a new seed unless FUZZ_SEED is given (`make
# test` runs 2 examples per op from a fixed seed; see docs/fuzzing.md).
.PHONY: fuzz
fuzz: build
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-100} FUZZ_COMPILE_EVERY=$${FUZZ_COMPILE_EVERY:-4} \
	  FUZZ_SEED=$${FUZZ_SEED:-random} $(PYTHON) -m pytest tests/fuzz/test_fuzz.py $(PYTEST_ARGS)

# The Hugging Face architecture sweep: every entry of transformers' MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
# tiny and random, on neuron against CPU, float32 then bfloat16; writes docs/hf_coverage*.md/json.
.PHONY: coverage
coverage: build
	$(PYTHON) testing/hf_sweep.py --output-dir docs $(SWEEP_ARGS)
	$(PYTHON) testing/hf_sweep.py --output-dir docs --dtype bfloat16 $(SWEEP_ARGS)

# The estimate's validation table against published results (docs/estimate.md); VALIDATE_ARGS
# selects rows (--rows trn-train,trn-infer,gpu).
.PHONY: validate-estimate
validate-estimate: build
	$(PYTHON) testing/estimate_validation.py $(VALIDATE_ARGS)

demo: build
	$(PYTHON) examples/quickstart.py

bench: build
	$(PYTHON) bench/eager.py

# The neuron process group against Gloo at 4 ranks, 4 KiB..256 MiB (docs/benchmarks.md).
.PHONY: bench-collectives
bench-collectives: build
	$(PYTHON) bench/collectives.py

# NKI interpreter speed: flash-attention forward vs torch SDPA on the CPU (docs/benchmarks.md).
.PHONY: bench-nki
bench-nki: build
	$(PYTHON) bench/nki.py

format:
	@command -v clang-format >/dev/null && find csrc tests/runtime -name '*.cpp' -o -name '*.h' | xargs clang-format -i || echo "clang-format not installed"
	$(PYTHON) -m ruff format torch_neuronx tests examples bench testing tools 2>/dev/null || echo "ruff not installed (pip install ruff)"

lint:
	$(PYTHON) -m ruff check torch_neuronx tests examples bench testing tools

clean:
	rm -rf build torch_neuronx/*.so

# The seed's layout: a tiny Llama fine-tuned by 32 ranks on one simulated trn1.32xlarge (TP=4 inside
# each replica x FSDP2 across the 8 replicas), checked against one CPU process, saved as a plain
# transformers checkpoint (docs/distributed_ecosystem.md). `make test` runs the same code at 4 ranks.
.PHONY: finetune-32 finetune-tp-fsdp-32
finetune-32: build
	@echo "finetune-32: 32 ranks start; each imports torch first (about a minute on 2 cores), then group rank 0 reports who has joined"
	NRTSIM_INSTANCE=trn1.32xlarge $(VENV)/bin/torchrun --standalone --nproc-per-node 32 \
	  examples/tp_fsdp_finetune.py --tp 4 --verify --out build/tiny-llama-tp-fsdp --metrics build/finetune-32.json
finetune-tp-fsdp-32: finetune-32

# torchtitan's Llama 3 debug model with FSDP2 + TP on neuron against one process. torchtitan and
# its pins (requirements/torchtitan.txt) go to build/torchtitan-site, not .venv: they clash with the
# Hugging Face stack's (docs/distributed_ecosystem.md).
TORCHTITAN_SITE := build/torchtitan-site
# The process group at cluster scale, simulated: 8 network-namespace hosts of 2 ranks each
# (needs root and iproute2), torchrun in each, the cross-host collectives test (docs/distributed.md).
.PHONY: test-8-hosts
test-8-hosts: build
	$(PYTHON) tests/distributed/many_hosts.py --hosts 8 --ranks-per-host 2 collectives records

.PHONY: test-torchtitan
test-torchtitan: build
	@test -f $(TORCHTITAN_SITE)/.installed || { $(PYTHON) -m pip install -q --no-deps --target $(TORCHTITAN_SITE) \
	  -r requirements/torchtitan.txt && touch $(TORCHTITAN_SITE)/.installed; }
	TORCH_NEURONX_TORCHTITAN_SITE=$(abspath $(TORCHTITAN_SITE)) $(PYTHON) -m pytest tests/distributed/test_ecosystem.py -k torchtitan $(PYTEST_ARGS)

# AWS's NKI library (github.com/aws-neuron/nki-library, Apache-2.0) as a conformance suite: its
# own tests, in their --test-mode simulation, run its kernels on this project's NKI interpreter
# against the library's torch references. The library is not installable from PyPI (nki-library
# 0.0.2 there is an empty placeholder) and CI reaches only PyPI and Debian, so it is taken from a
# checkout you fetch: make nki-library NKI_LIBRARY=/path/to/nki-library [NKI_LIBRARY_TESTS=...].
# docs/nki.md ("AWS's NKI library") records the pass counts and the gaps.
NKI_LIBRARY_SITE := build/nki-library-site
NKI_LIBRARY_TESTS ?= test/integration
# The harness's pinned dependencies (ml_dtypes among them), without what the venv already has.
.PHONY: nki-library-site
nki-library-site:
	@test -f $(NKI_LIBRARY_SITE)/.installed || { $(PYTHON) -m pip install -q --target $(NKI_LIBRARY_SITE) \
	  -r requirements/nki-library.txt && cd $(NKI_LIBRARY_SITE) && \
	  rm -rf numpy numpy-* numpy.libs torch torch-* pytest pytest-[0-9]* _pytest pluggy pluggy-* py.py \
	    iniconfig iniconfig-* && touch .installed; }

.PHONY: nki-library
nki-library: build
	@test -n "$(NKI_LIBRARY)" && test -d "$(NKI_LIBRARY)/src/nkilib_src" || { \
	  echo "set NKI_LIBRARY to a checkout of github.com/aws-neuron/nki-library" >&2; exit 2; }
	@$(MAKE) -s nki-library-site
	cd $(NKI_LIBRARY) && PYTHONPATH=$(abspath tools/nki_library_shim):$(abspath .):$(abspath $(NKI_LIBRARY))/src:$(abspath $(NKI_LIBRARY_SITE)):$(abspath $(NKI_LIBRARY)) \
	  $(abspath $(PYTHON)) -m pytest $(NKI_LIBRARY_TESTS) --test-mode simulation -p no:cacheprovider \
	  -p nki_library_plugin -q -rfE $(PYTEST_ARGS)

# AWS's NKI samples written for the earlier neuronxcc.nki API (github.com/aws-neuron/nki-samples
# at commit 7af4e4d, the last that holds src/nki_samples/reference; MIT-0): their unit tests'
# simulation cases run through nki.legacy against their NumPy references, from a checkout you
# export: git -C <clone> archive 7af4e4d | tar x -C <dir>; make nki-samples NKI_SAMPLES=<dir>.
# docs/nki.md ("AWS's samples for the earlier API") records what passes.
.PHONY: nki-samples
nki-samples: build
	@test -n "$(NKI_SAMPLES)" && test -d "$(NKI_SAMPLES)/src/nki_samples/reference" || { \
	  echo "set NKI_SAMPLES to an export of github.com/aws-neuron/nki-samples at 7af4e4d" >&2; exit 2; }
	@$(MAKE) -s nki-library-site
	cd $(NKI_SAMPLES) && PYTHONPATH=$(abspath .):$(abspath $(NKI_SAMPLES))/src:$(abspath $(NKI_LIBRARY_SITE)) \
	  $(abspath $(PYTHON)) -m pytest test/unit --simulation-only -p no:cacheprovider \
	  --continue-on-collection-errors -q -rfE $(PYTEST_ARGS)
