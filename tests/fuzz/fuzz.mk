# Sanitizer builds and fuzzing (included by the Makefile; tests/fuzz/README.md).
#
#   make asan          ASan+UBSan build in build-asan/: strata, strata-tests,
#                      and the fuzz targets with a plain main (fuzz-<target>)
#   make fuzz-targets  libFuzzer targets (clang) in build-fuzz/fuzz-<target>
#   make fuzz          the long harness run against build-asan/strata
#   make fuzz-lib      each libFuzzer target for FUZZ_SECONDS (60) from its corpus
#   make fuzz-slice    the short seeded slice `make test` runs (seconds)
#   make test-asan     the C unit tests on the ASan+UBSan build, every report fatal
ASAN_DIR     = build-asan
FUZZ_DIR     = build-fuzz
FUZZ_CC      = clang
SAN_FLAGS    = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined
FUZZ_FLAGS   = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_TARGETS = gguf json tmpl diskhdr tok
FUZZ_SECONDS ?= 60

ASAN_OBJ      := $(SRC_C:%.c=$(ASAN_DIR)/%.o)
ASAN_TEST_OBJ := $(TEST_SRC:%.c=$(ASAN_DIR)/%.o)
FUZZ_OBJ      := $(SRC_C:%.c=$(FUZZ_DIR)/%.o)

.PHONY: asan fuzz fuzz-targets fuzz-lib fuzz-slice fuzz-drivers test-asan
.PRECIOUS: build/tests/fuzz/%.o $(ASAN_DIR)/%.o $(FUZZ_DIR)/%.o

asan: $(ASAN_DIR)/strata $(ASAN_DIR)/strata-tests $(FUZZ_TARGETS:%=$(ASAN_DIR)/fuzz-%)

$(ASAN_DIR)/strata: $(ASAN_DIR)/src/main.o $(ASAN_OBJ)
	$(CC) $(CFLAGS) $(SAN_FLAGS) -o $@ $^ $(LDLIBS)

$(ASAN_DIR)/strata-tests: $(ASAN_TEST_OBJ) $(ASAN_OBJ)
	$(CC) $(CFLAGS) $(SAN_FLAGS) -o $@ $^ $(LDLIBS)

$(ASAN_DIR)/fuzz-%: $(ASAN_DIR)/tests/fuzz/fuzz_%.o $(ASAN_DIR)/tests/fuzz/standalone.o $(ASAN_OBJ)
	$(CC) $(CFLAGS) $(SAN_FLAGS) -o $@ $^ $(LDLIBS)

$(ASAN_DIR)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN_FLAGS) $(AVX2_FLAGS) -c -o $@ $<

$(ASAN_DIR)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN_FLAGS) $(AVX512_FLAGS) -c -o $@ $<

$(ASAN_DIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN_FLAGS) -c -o $@ $<

# The unit tests on the sanitizer build: an ASan or UBSan report, or a leak
# at a test's end (tests/test_main.c checks in each test's process), fails
# that test. The tests that read the real models (real_*, gemma3_*) are left
# out unless STRATA_MODEL / STRATA_GEMMA3_MODEL are given: under the
# sanitizers they take most of an hour. Needs the fixtures (make testdata;
# TEST_DATA_DIR=DIR for another folder).
TEST_DATA_DIR ?= tests/data/gen
test-asan: $(ASAN_DIR)/strata-tests
	TEST_DATA_DIR=$(abspath $(TEST_DATA_DIR)) ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(ASAN_DIR)/strata-tests

# The same targets with a plain main and no sanitizer, for the short slice.
fuzz-drivers: $(FUZZ_TARGETS:%=build/fuzz-%)

build/fuzz-%: build/tests/fuzz/fuzz_%.o build/tests/fuzz/standalone.o $(OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# libFuzzer: every object instrumented for coverage, linked with its main.
fuzz-targets: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz-%)

$(FUZZ_DIR)/fuzz-%: $(FUZZ_DIR)/tests/fuzz/fuzz_%.o $(FUZZ_OBJ)
	$(FUZZ_CC) $(CFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

$(FUZZ_DIR)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link $(AVX2_FLAGS) -c -o $@ $<

$(FUZZ_DIR)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link $(AVX512_FLAGS) -c -o $@ $<

$(FUZZ_DIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

fuzz: asan model testdata
	$(PYTHON) tests/fuzz/run_all.py --long --bin $(ASAN_DIR)

fuzz-lib: fuzz-targets model testdata
	$(PYTHON) tests/fuzz/run_libfuzzer.py --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The seed corpora through each target (plain build), then the harness slice.
# Well-formed GGUF seeds are the generated test models (make testdata), not
# committed files; the committed gguf seeds are hand-made malformed headers.
FUZZ_GGUF_MODELS = $(wildcard tests/data/gen/models/*.gguf tests/data/gen/tok/*.gguf)
fuzz-slice: strata fuzz-drivers
	@for t in $(FUZZ_TARGETS); do build/fuzz-$$t tests/fuzz/corpus/$$t/* || exit 1; done
	@build/fuzz-gguf $(FUZZ_GGUF_MODELS)
	$(PYTHON) tests/fuzz/run_all.py --short --bin build --strata ./strata

$(ASAN_DIR)/src/server/ui_assets.o $(FUZZ_DIR)/src/server/ui_assets.o: $(UI_FILES)

-include $(ASAN_OBJ:.o=.d) $(ASAN_TEST_OBJ:.o=.d) $(FUZZ_OBJ:.o=.d) $(ASAN_DIR)/src/main.d
-include $(wildcard build/tests/fuzz/*.d)
