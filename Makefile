# remat: a plain Makefile. `make` builds libremat.a and the remat CLI,
# `make test` runs the whole test suite, `make run` trains the default GPT.
CC      ?= cc
OPT     ?= -O2 -g
# GCC's -O2 vectorises only loops whose trip count suits its "very cheap"
# cost model: the rows of a causal softmax, and other loops of variable
# length, stayed scalar (exp 5x slower). Compilers without the flag skip it.
VECTORIZE := $(shell $(CC) -fvect-cost-model=dynamic -E -x c /dev/null >/dev/null 2>&1 && echo -fvect-cost-model=dynamic)
CFLAGS  := $(OPT) $(VECTORIZE) -std=c11 -Wall -Wextra -D_POSIX_C_SOURCE=200809L -Iinclude -fopenmp -march=native
LDLIBS  += -lm -fopenmp $(SAN)
CFLAGS  += $(SAN)
BUILD   ?= build

# OpenBLAS is optional: without it remat uses its portable GEMM.
# REMAT_NO_BLAS=1 forces the fallback. Debian ships OpenBLAS built for
# pthreads and for OpenMP; we prefer the OpenMP build (libopenblas-openmp-dev)
# because it shares remat's OpenMP threads instead of adding its own. It is
# loaded by its full path with dlopen at the first multiply (src/util/gemm.c
# says why), so the system's default alternative cannot swap it.
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
OMP_BLAS_PC := /usr/lib/$(MULTIARCH)/openblas-openmp/pkgconfig
ifeq ($(REMAT_NO_BLAS),)
ifneq ($(wildcard $(OMP_BLAS_PC)/openblas.pc),)
BLAS_ENV := PKG_CONFIG_PATH=$(OMP_BLAS_PC)
endif
BLAS_PC := $(shell $(BLAS_ENV) pkg-config --exists openblas 2>/dev/null && echo openblas)
endif
ifneq ($(BLAS_PC),)
BLAS_LIBDIR := $(shell $(BLAS_ENV) pkg-config --variable=libdir openblas)
CFLAGS  += -DREMAT_HAVE_BLAS -DREMAT_BLAS_SO='"$(BLAS_LIBDIR)/libopenblas.so.0"' $(shell $(BLAS_ENV) pkg-config --cflags openblas)
LDLIBS  += -ldl
endif

# cJSON parses safetensors headers.
CFLAGS  += $(shell pkg-config --cflags libcjson 2>/dev/null)
LDLIBS  += $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson)
# Nettle's SHA-256 checksums checkpoint files (src/train/checksum.c).
CFLAGS  += $(shell pkg-config --cflags nettle 2>/dev/null)
LDLIBS  += $(shell pkg-config --libs nettle 2>/dev/null || echo -lnettle)

LIB_SRC := $(sort $(wildcard src/*/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/corpus.o
CLI_SRC := $(sort $(wildcard cli/*.c))
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
HDRS := $(wildcard include/*.h src/*.h src/*/*.h tests/*.h cli/*.h)

# The corpus embedded in the binary: the project's own docs and sources, so
# `remat train` with no --data needs no files and no network.
CORPUS_FILES := $(sort $(wildcard README.md docs/*.md include/*.h src/*.h src/*/*.c src/*/*.h cli/*.c))

.PHONY: all test run clean bench asan
all: $(BUILD)/remat

# The library sees its internal headers (-Isrc); cli/ is a client of the
# public API only: it is compiled with -Iinclude alone.
$(BUILD)/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -c $< -o $@

$(BUILD)/cli/%.o: cli/%.c include/remat.h cli/*.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/bin2c: tools/bin2c.c
	@mkdir -p $(BUILD)
	$(CC) -O2 -o $@ $<

$(BUILD)/corpus.txt: $(CORPUS_FILES)
	@mkdir -p $(BUILD)
	cat $(CORPUS_FILES) > $@

$(BUILD)/corpus.c: $(BUILD)/corpus.txt $(BUILD)/bin2c
	$(BUILD)/bin2c rm_corpus $< > $@

$(BUILD)/corpus.o: $(BUILD)/corpus.c
	$(CC) -O0 -c $< -o $@

$(BUILD)/libremat.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/remat: $(CLI_OBJ) $(BUILD)/libremat.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libremat.a $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libremat.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -o $@ $< $(BUILD)/libremat.a $(LDLIBS)

test: $(BUILD)/remat $(TEST_BIN)
	@BUILD=$(BUILD) sh tests/run_all.sh $(TEST_BIN)

run: $(BUILD)/remat
	sh tools/run_demo.sh $(BUILD)/remat

bench: $(BUILD)/remat
	sh bench/run.sh

# The same tests under AddressSanitizer and UBSan, in their own build dir;
# any report stops the program (-fno-sanitize-recover=all), so it fails its test.
# Uninitialised locals are filled with a non-zero pattern (GCC 12+, clang),
# so a char buffer read before it is written has no terminating zero and
# ASan sees the read run off its end (as the planner's old `notes[8]` did).
AUTOINIT := $(shell $(CC) -ftrivial-auto-var-init=pattern -E -x c /dev/null >/dev/null 2>&1 && echo -ftrivial-auto-var-init=pattern)
asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -g" SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer $(AUTOINIT)" test

clean:
	rm -rf build build-asan
