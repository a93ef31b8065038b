# remat: a plain Makefile. `make` builds the remat CLI, libremat.a and
# libremat.so (what docs/PYTORCH.md and a program on the library need),
# `make test` runs the whole test suite, `make run` trains the default GPT.
CC      ?= cc
OPT     ?= -O2 -g
# GCC's -O2 vectorises only loops whose trip count suits its "very cheap"
# cost model: the rows of a causal softmax, and other loops of variable
# length, stayed scalar (exp 5x slower). Compilers without the flag skip it.
VECTORIZE := $(shell $(CC) -fvect-cost-model=dynamic -E -x c /dev/null >/dev/null 2>&1 && echo -fvect-cost-model=dynamic)
# -fno-trapping-math: no floating-point trap handlers are used, so GCC may
# turn a float comparison's ?: into a vector select. Without it (GCC's
# default) every loop through rm_fast_expf's clamps (GELU, SiLU, SwiGLU,
# softmax rows) and other loops with a float ?: stayed scalar ("control
# flow in loop"). Values do not change: the same IEEE operations element by
# element, no reassociation, no contraction (-std=c11: -ffp-contract=off).
VECTORIZE += $(shell $(CC) -fno-trapping-math -E -x c /dev/null >/dev/null 2>&1 && echo -fno-trapping-math)
# ARCH: the CPU the code is built for. The default builds for this machine; a
# library to ship (pip install ./python, tools/pack_gpu.sh) is built with
# ARCH="-march=x86-64-v2" or another portable target.
ARCH    ?= -march=native
CFLAGS  := $(OPT) $(VECTORIZE) -std=c11 -Wall -Wextra -D_POSIX_C_SOURCE=200809L -Iinclude -fopenmp $(ARCH)
LDLIBS  += -lm -fopenmp $(SAN)
CFLAGS  += $(SAN)
BUILD   ?= build
PREFIX  ?= /usr/local
VERSION := $(shell sed -n 's/^\#define RM_VERSION "\(.*\)"/\1/p' include/remat.h)
SOVERSION := $(firstword $(subst ., ,$(VERSION)))
# One object set serves libremat.a and libremat.so: everything is compiled
# position-independent (speed: docs/PERFORMANCE.md, "Position-independent code").
CFLAGS  += -fPIC

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

# oneDNN (libdnnl-dev) is optional too: --precision bf16 multiplies on its
# brgemm matmul where the processor has bf16 (src/util/onednn.c). Found by
# its header and its library's full path, loaded with dlopen when a bf16
# session compiles; without it bf16 products take OpenBLAS's sgemm or
# remat's own kernel. REMAT_NO_DNNL=1 builds without it.
ifeq ($(REMAT_NO_DNNL),)
DNNL_SO := $(shell $(CC) -print-file-name=libdnnl.so.2)
DNNL_H := $(shell echo '\#include <oneapi/dnnl/dnnl.h>' | $(CC) -E -x c - >/dev/null 2>&1 && echo yes)
endif
ifneq ($(and $(DNNL_H),$(filter /%,$(DNNL_SO))),)
CFLAGS  += -DREMAT_HAVE_DNNL -DREMAT_DNNL_SO='"$(abspath $(DNNL_SO))"'
LDLIBS  += -ldl
endif

# MPI (data-parallel training, docs/SCALING.md): `make MPI=1` builds with
# Open MPI's mpicc, `make MPI=0` without; by default mpicc is used when it is
# on the PATH. Without MPI the library builds and runs as before, and its
# data-parallel calls return RM_ERR_STATE. The public header never includes
# mpi.h (include/remat_mpi.h does, for programs built with mpicc).
ifeq ($(MPI),)
MPI := $(if $(shell command -v mpicc 2>/dev/null),1,0)
endif
ifeq ($(MPI),1)
CC      := mpicc
CFLAGS  += -DREMAT_MPI
# spelled out for remat.pc's static link (programs built with plain cc)
LDLIBS  += $(shell mpicc --showme:link 2>/dev/null)
endif

# liburing (liburing-dev): the scratch tier's transfers through io_uring
# (src/util/ioq.c), several in flight; without it, an I/O thread.
URING_LIBS := $(shell pkg-config --libs liburing 2>/dev/null)
ifneq ($(URING_LIBS),)
CFLAGS  += -DREMAT_HAVE_URING $(shell pkg-config --cflags liburing 2>/dev/null)
LDLIBS  += $(URING_LIBS)
endif

# cJSON parses safetensors headers.
CFLAGS  += $(shell pkg-config --cflags libcjson 2>/dev/null)
LDLIBS  += $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson)
# Nettle's SHA-256 checksums checkpoint files (src/train/checksum.c).
CFLAGS  += $(shell pkg-config --cflags nettle 2>/dev/null)
LDLIBS  += $(shell pkg-config --libs nettle 2>/dev/null || echo -lnettle)

LIB_SRC := $(sort $(wildcard src/*/*.c src/*/*/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/corpus.o
CLI_SRC := $(sort $(wildcard cli/*.c))
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# The NULL-argument test of the public API is generated from remat.h
# (tests/null_api.awk), so every function declared there is in it.
TEST_BIN += $(BUILD)/tests/test_null_api
# tests/mpi_api.c runs under mpirun (tests/test_mpi.sh), not on its own
MPI_TEST_BIN := $(if $(filter 1,$(MPI)),$(BUILD)/tests/mpi_api)
# tests/hf_check.c is the C side of tests/hf_torch.py (run by test_hf_torch.sh)
HELPER_BIN := $(BUILD)/tests/hf_check
EX_SRC := $(sort $(wildcard examples/*.c))
EX_BIN := $(EX_SRC:examples/%.c=$(BUILD)/examples/%)
HDRS := $(wildcard include/*.h src/*.h src/*/*.h src/*/*/*.h tests/*.h cli/*.h)

# The corpus embedded in the binary, so `remat train` with no --data needs
# no files and no network: a fixed text (the project's docs and sources as
# they were at commit 18c20ac, 891180 bytes), committed gzipped. It was made
# from the sources at build time, so every commit trained on other text and
# the losses quoted in docs and tests drifted; it no longer changes.

.PHONY: all test run clean bench asan install examples test-torch2 FORCE
all: $(BUILD)/remat $(BUILD)/libremat.a $(BUILD)/libremat.so

# The library sees its internal headers (-Isrc); cli/ is a client of the
# public API only: it is compiled with -Iinclude alone.
# Objects are rebuilt when the flags change (e.g. an old non-PIC build dir).
$(BUILD)/cflags.txt: FORCE
	@mkdir -p $(BUILD)
	@echo '$(CC) $(CFLAGS)' | cmp -s - $@ || echo '$(CC) $(CFLAGS)' > $@
FORCE:

$(BUILD)/%.o: %.c $(HDRS) $(BUILD)/cflags.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -c $< -o $@

# AdamW's sqrtf never sees a negative number: without errno its loop
# vectorises (vsqrtps rounds as sqrtf does: the same weights, 1.6x faster)
$(BUILD)/src/train/optim.o: CFLAGS += -fno-math-errno

$(BUILD)/cli/%.o: cli/%.c include/remat.h cli/*.h $(BUILD)/cflags.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/bin2c: tools/bin2c.c
	@mkdir -p $(BUILD)
	$(CC) -O2 -o $@ $<

$(BUILD)/corpus.txt: data/corpus.txt.gz
	@mkdir -p $(BUILD)
	gzip -dc $< > $@.tmp && mv $@.tmp $@

$(BUILD)/corpus.c: $(BUILD)/corpus.txt $(BUILD)/bin2c
	$(BUILD)/bin2c rm_corpus $< > $@

$(BUILD)/corpus.o: $(BUILD)/corpus.c
	$(CC) -O0 -fPIC -c $< -o $@

$(BUILD)/libremat.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

# The shared library: soname libremat.so.MAJOR.
$(BUILD)/libremat.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libremat.so.$(SOVERSION) -o $@.$(VERSION) $(LIB_OBJ) $(LDLIBS)
	ln -sf libremat.so.$(VERSION) $@.$(SOVERSION)
	ln -sf libremat.so.$(VERSION) $@

# examples/ are clients of the public API, like cli/: -Iinclude only.
examples: $(EX_BIN)
$(BUILD)/examples/%: examples/%.c $(BUILD)/libremat.a include/remat.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libremat.a $(LDLIBS)

$(BUILD)/remat: $(CLI_OBJ) $(BUILD)/libremat.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libremat.a $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libremat.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -o $@ $< $(BUILD)/libremat.a $(LDLIBS)

# bench/bf16_pair.c: bf16 against fp32 step by step in one process (remat.h alone)
$(BUILD)/bench/bf16_pair: bench/bf16_pair.c bench/bench_clock.h $(BUILD)/libremat.a include/remat.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libremat.a $(LDLIBS)

# bench/gemm_peak.c: the sgemm peak (cblas, linked) and rm_gemm_bf16's (libremat);
# bench/bf16_linear.c: a linear layer's bf16 forward against fp32's, alone
$(BUILD)/bench/gemm_peak $(BUILD)/bench/bf16_linear: $(BUILD)/bench/%: bench/%.c bench/bench_clock.h $(BUILD)/libremat.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -o $@ $< $(BUILD)/libremat.a $(LDLIBS) $(shell $(BLAS_ENV) pkg-config --libs openblas 2>/dev/null) -Wl,-rpath,$(BLAS_LIBDIR)

$(BUILD)/tests/test_null_api.c: include/remat.h tests/null_api.awk
	@mkdir -p $(dir $@)
	$(CC) -E -P -Iinclude include/remat.h | awk -f tests/null_api.awk > $@.tmp && mv $@.tmp $@

$(BUILD)/tests/test_null_api: $(BUILD)/tests/test_null_api.c tests/null_api.h tests/check.h $(BUILD)/libremat.a
	$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libremat.a $(LDLIBS)

# The optimality oracle solves Checkmate's integer program with GLPK
# (libglpk-dev), for the tests only: libremat does not link it.
$(BUILD)/tests/test_oracle: LDLIBS += -lglpk

test: $(BUILD)/remat $(TEST_BIN) $(MPI_TEST_BIN) $(HELPER_BIN) $(EX_BIN) $(BUILD)/libremat.so
	@BUILD=$(BUILD) REMAT_MPI_BUILD=$(MPI) sh tests/run_all.sh $(TEST_BIN)

# rematplan with torch >= 2.4 and transformers from PyPI, in a venv (not in
# `make test`: the wheels are gigabytes): tests/python_rematplan_hf.py, the
# same checks as tests/test_python.sh plus transformers' GPT-2 and Llama,
# selective checkpointing and compile mode. TORCH2_PYTHON is that venv's
# python (docs/PYTORCH.md, "Tests").
TORCH2_PYTHON ?= python3
test-torch2: $(BUILD)/remat $(BUILD)/libremat.so
	REMAT_LIBRARY=$(abspath $(BUILD))/libremat.so PYTHONPATH=python KINETO_LOG_LEVEL=5 \
	    $(TORCH2_PYTHON) tests/python_rematplan_hf.py --remat $(BUILD)/remat

run: $(BUILD)/remat
	sh tools/run_demo.sh $(BUILD)/remat

bench: $(BUILD)/remat
	sh bench/run.sh

# The same tests under AddressSanitizer and UBSan, in their own build dir;
# any report stops the program (-fno-sanitize-recover=all), so it fails its test.
# float-cast-overflow (not in -fsanitize=undefined) catches a float converted
# to an integer type that cannot hold it (1e30 to int64_t).
# Uninitialised locals are filled with a non-zero pattern (GCC 12+, clang),
# so a char buffer read before it is written has no terminating zero and
# ASan sees the read run off its end (as the planner's old `notes[8]` did).
AUTOINIT := $(shell $(CC) -ftrivial-auto-var-init=pattern -E -x c /dev/null >/dev/null 2>&1 && echo -ftrivial-auto-var-init=pattern)
asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -g" SAN="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer $(AUTOINIT)" test

# make install PREFIX=/opt/remat (and DESTDIR= for packaging): the header,
# libremat.a, libremat.so, remat.pc for pkg-config, and the remat CLI.
install: $(BUILD)/remat $(BUILD)/libremat.a $(BUILD)/libremat.so
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/remat.h include/remat_mpi.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libremat.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libremat.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libremat.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libremat.so.$(SOVERSION)
	ln -sf libremat.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libremat.so
	install -m 755 $(BUILD)/remat $(DESTDIR)$(PREFIX)/bin/
	printf '%s\n' 'prefix=$(PREFIX)' 'includedir=$${prefix}/include' 'libdir=$${prefix}/lib' '' \
	    'Name: remat' 'Description: training under a memory budget by activation recomputation' \
	    'Version: $(VERSION)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lremat' \
	    'Libs.private: $(strip $(LDLIBS))' > $(DESTDIR)$(PREFIX)/lib/pkgconfig/remat.pc

clean:
	rm -rf build build-asan
