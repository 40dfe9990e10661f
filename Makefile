# Aquila — one non-recursive Makefile. Outputs go under $(BUILD) (build/ by
# default; build-tsan/ and build-asan/ for the sanitizer runs).
#
#   make            library, code objects, tools, examples, tests
#   make demo       the main job: Fashion-MNIST training on whatever agents exist
#   make test       builds and runs the test suites
#   make tsan|asan  the tests again under ThreadSanitizer / AddressSanitizer
#   make install PREFIX=/usr/local
#
# Each layer's sources are found by wildcard; a folder may add rules of its
# own in a module.mk (kernels/module.mk builds the CUDA fatbin).

BUILD   ?= build
PREFIX  ?= /usr/local
CC      := gcc
SAN     ?=
VERSION := 0.1.0
SOVER   := 0

OPT     ?= -O2
CPPFLAGS := -Iinclude -I. -D_GNU_SOURCE -DAQ_VERSION_STRING='"$(VERSION)"'
CFLAGS  := -std=c11 $(OPT) -g -fPIC -pthread -Wall -Wextra -Werror -Wno-format-truncation -MMD -MP \
           -fvisibility=hidden
LDFLAGS := -pthread
# C++ only where a test builds kernels/cuda's thread-level headers for the
# host (tests/unit/*.cc): the C flags, sanitizers included, in C++17 (and
# nvcc's unroll pragmas passed over).
CXXFLAGS = $(filter-out -std=c11,$(CFLAGS)) -std=c++17 -Wno-unknown-pragmas
ifeq ($(SAN),thread)
  CFLAGS  += -fsanitize=thread -O1
  LDFLAGS += -fsanitize=thread
endif
ifeq ($(SAN),address)
  CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=address,undefined
endif

# Deferred (=) so pkg-config runs after the dependency check has installed it.
PKG_CFLAGS = $(shell pkg-config --cflags hwloc numa 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs hwloc numa 2>/dev/null) -ldl -lm
CRIT_LIBS  = $(shell pkg-config --libs criterion 2>/dev/null)
BLAS_CFLAGS = $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS  = $(shell pkg-config --libs openblas 2>/dev/null)
# Only the programs that call BLAS keep it: loading OpenBLAS starts its
# thread pool, and a program that exits at once (aq-trace, a refused
# aq-info) raced those threads' start under LeakSanitizer.
AS_NEEDED_BLAS = -Wl,--as-needed $(BLAS_LIBS) -Wl,--no-as-needed
ZLIB_LIBS  = $(shell pkg-config --libs zlib 2>/dev/null)

DEPS_OK := $(BUILD)/.deps-ok
LIBDIR  := $(BUILD)/lib
BINDIR  := $(BUILD)/bin
OBJDIR  := $(BUILD)/obj
COLIB   := $(LIBDIR)/aquila

# ---- libaquila --------------------------------------------------------------
LIB_SRCS := $(sort $(wildcard runtime/*.c runtime/drivers/*.c scheduler/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(OBJDIR)/%.o)
SONAME   := libaquila.so.$(SOVER)
LIB_SO   := $(LIBDIR)/libaquila.so.$(VERSION)
LIB_A    := $(LIBDIR)/libaquila.a
RPATH    := -Wl,-rpath,'$$$$ORIGIN/../lib'

# ---- code objects -----------------------------------------------------------
KCPU_SRCS := $(sort $(wildcard kernels/cpu/*.c))
KCPU_OBJS := $(KCPU_SRCS:%.c=$(OBJDIR)/%.o)
KCPU_SO   := $(COLIB)/kernels-cpu.so

# ---- tools, examples, tests: one program per folder --------------------------
TOOLS     := $(filter-out common,$(notdir $(patsubst %/,%,$(sort $(dir $(wildcard tools/*/*.c))))))
EXAMPLES  := $(notdir $(patsubst %/,%,$(sort $(dir $(wildcard examples/*/*.c)))))
TESTS     := $(filter-out data stress,$(notdir $(patsubst %/,%,$(sort $(dir $(wildcard tests/*/*.c))))))
TOOL_BINS := $(TOOLS:%=$(BINDIR)/%)
EX_BINS   := $(EXAMPLES:%=$(BUILD)/examples/%)
TEST_BINS := $(TESTS:%=$(BUILD)/tests/%)

ALL := $(LIB_SO) $(LIB_A) $(KCPU_SO) $(LIBDIR)/libaquila-train.a $(TOOL_BINS) $(EX_BINS) $(LIBDIR)/pkgconfig/aquila.pc
.PHONY: all test demo tsan tsan-run asan install clean deps
all: $(ALL)

deps: $(DEPS_OK)
$(DEPS_OK): tools/install-deps.sh
	@mkdir -p $(@D)
	@tools/install-deps.sh
	@touch $@

$(OBJDIR)/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(PKG_CFLAGS) $(CFLAGS) -c $< -o $@
$(OBJDIR)/%.o: %.cc | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(LIB_SO): $(LIB_OBJS)
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,$(SONAME) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)
	ln -sf libaquila.so.$(VERSION) $(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(LIBDIR)/libaquila.so

$(LIB_A): $(LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# Code objects are plain shared objects: no libaquila, no sanitizer runtime
# needs beyond what the host process has.
$(KCPU_SO): $(KCPU_OBJS)
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -o $@ $^ -lm

$(OBJDIR)/kernels/%.o: CFLAGS += -O3 -fvisibility=hidden

# The training library (scheduler/train): a static library on the public
# API that the training example, aq-bench and the tests link.
TRAIN_SRCS := $(sort $(wildcard scheduler/train/*.c))
TRAIN_LIB  := $(LIBDIR)/libaquila-train.a
$(TRAIN_LIB): $(TRAIN_SRCS:%.c=$(OBJDIR)/%.o)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/examples/train_fashion: $(TRAIN_LIB)

# One program per folder: tools/aq-info/*.c -> bin/aq-info, and so on; a
# static library among its prerequisites is linked before libaquila.
define program
$(1): $$(patsubst %.c,$(OBJDIR)/%.o,$$(wildcard $(2)/*.c)) $(LIB_SO)
	@mkdir -p $$(@D)
	$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o %.a,$$^) -L$(LIBDIR) -laquila $(RPATH) $(3) $$(EXTRA_LIBS)
endef
$(foreach t,$(TOOLS),$(eval $(call program,$(BINDIR)/$(t),tools/$(t),$$(PKG_LIBS) $$(AS_NEEDED_BLAS) $$(ZLIB_LIBS))))
$(foreach e,$(EXAMPLES),$(eval $(call program,$(BUILD)/examples/$(e),examples/$(e),$$(PKG_LIBS) $$(ZLIB_LIBS))))
$(foreach t,$(filter-out unit,$(TESTS)),$(eval $(call program,$(BUILD)/tests/$(t),tests/$(t),$$(CRIT_LIBS) $$(PKG_LIBS) $$(AS_NEEDED_BLAS) $$(ZLIB_LIBS))))
# Unit tests of the library's internal modules (tests/unit) link the static
# library: the shared one exports only the aq_ API; and the few kernel
# modules whose logic is tested apart from their kernels.
UNIT_KERNEL_OBJS := $(OBJDIR)/kernels/cpu/gemm_share.o
$(BUILD)/tests/unit: $(patsubst %.c,$(OBJDIR)/%.o,$(wildcard tests/unit/*.c)) \
                    $(patsubst %.cc,$(OBJDIR)/%.o,$(wildcard tests/unit/*.cc)) $(UNIT_KERNEL_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_A) $(CRIT_LIBS) $(PKG_LIBS)
# The thread stress program is plain C: ThreadSanitizer cannot run Criterion.
STRESS_BIN := $(BUILD)/tests/stress
$(eval $(call program,$(STRESS_BIN),tests/stress,$$(PKG_LIBS)))
$(OBJDIR)/tools/%.o $(OBJDIR)/tests/%.o: CPPFLAGS += $(BLAS_CFLAGS)
# Every tool and example reads its command line through tools/common/cli.c.
CLI_OBJ := $(OBJDIR)/tools/common/cli.o
$(TOOL_BINS) $(EX_BINS): $(CLI_OBJ)

# pkg-config file: the build tree's points at the build tree; install writes
# one for its PREFIX. Libs carries an rpath to libdir (argument 5) where the
# dynamic linker would not look by itself; Libs.private is what libaquila.a
# needs (pkg-config --static).
define write_pc
	printf 'prefix=%s\nlibdir=%s\nincludedir=%s\n\nName: aquila\nDescription: user-mode heterogeneous runtime (AQL queues, task graphs)\nVersion: %s\nCflags: -I$${includedir}\nLibs: -L$${libdir} %s-laquila\nLibs.private: -lhwloc -lnuma -ldl -lm -lpthread\n' '$(1)' '$(2)' '$(3)' '$(VERSION)' '$(5)' > $(4)
endef
$(LIBDIR)/pkgconfig/aquila.pc: Makefile
	@mkdir -p $(@D)
	$(call write_pc,$(CURDIR),$(abspath $(LIBDIR)),$(CURDIR)/include,$@,-Wl$(comma)-rpath$(comma)$${libdir} )

-include $(wildcard */module.mk */*/module.mk)

# Test programs and code objects the tests load.
TEST_DATA :=
-include tests/data.mk

# The scheduler's suites run twice: first on hwloc's synthetic 64 cores (16
# workers watching the queues, 48 in reserve, as on the 4-GPU machine), then
# every suite on this machine's own topology. The first pass is CPU agents
# only: a GPU's place in a made-up topology means nothing.
test: all $(TEST_BINS) $(STRESS_BIN) $(TEST_DATA)
	@tools/check-symbols.sh $(BUILD)
	@echo "== graph and unit on hwloc's synthetic 64 cores"
	@AQ_AGENTS=cpu HWLOC_SYNTHETIC="package:1 core:64 pu:1" tools/run-tests.sh $(BUILD) $(BUILD)/tests/graph $(BUILD)/tests/unit
	@AQ_BUILD_DIR=$(BUILD) AQ_BUILD_SAN=$(SAN) tools/run-tests.sh $(BUILD) $(TEST_BINS) $(STRESS_BIN)

# Sanitizer runs: ASan (+UBSan) runs every suite; TSan runs the thread
# stress program and the examples, which is where the threads are.
tsan:
	$(MAKE) BUILD=build-tsan SAN=thread tsan-run
tsan-run: all $(STRESS_BIN) $(TEST_DATA)
	@tools/run-tests.sh $(BUILD) $(STRESS_BIN) --quick
	@echo "== the same, recording a trace"
	@AQ_TRACE=$(BUILD)/stress-trace.json tools/run-tests.sh $(BUILD) $(STRESS_BIN) --quick
	@echo "== the same, one worker watching the queues (the others a reserve)"
	@AQ_CPU_WATCHERS=1 tools/run-tests.sh $(BUILD) $(STRESS_BIN) --quick
	@echo "== the same on hwloc's synthetic 24 cores (16 watchers, 8 reserve workers)"
	@HWLOC_SYNTHETIC="package:1 core:24 pu:1" tools/run-tests.sh $(BUILD) $(STRESS_BIN) --quick
asan:
	$(MAKE) BUILD=build-asan SAN=address test

demo: all
	@tools/demo.sh $(BUILD)

# install: the library is linked again for PREFIX, its code-object
# directory compiled in (runtime/install_dir.c) so that a program linked
# with libaquila.a finds the installed code objects; the build tree's
# library is left as it is. Under /usr and /usr/local the dynamic linker
# finds libaquila.so once ldconfig has run; elsewhere the installed .pc
# adds an rpath to Libs. No Requires.private: hwloc's own .pc would add
# -ludev for a static libhwloc, which libaquila.a does not need (it uses
# libhwloc.so) and a machine without libudev-dev cannot link.
comma := ,
SYSTEM_PREFIXES := /usr /usr/local
INSTALL_OBJDIR := $(BUILD)/install-obj
INSTALL_DIR_OBJ := $(OBJDIR)/runtime/install_dir.o
INSTALL_LIB_OBJS = $(filter-out $(INSTALL_DIR_OBJ),$(LIB_OBJS)) $(INSTALL_OBJDIR)/install_dir.o
.PHONY: install-lib
install-lib: $(LIB_OBJS)
	@mkdir -p $(INSTALL_OBJDIR)
	$(CC) $(CPPFLAGS) $(CFLAGS) '-DAQ_INSTALL_CODE_OBJECT_DIR="$(abspath $(PREFIX))/lib/aquila"' \
	  -c runtime/install_dir.c -o $(INSTALL_OBJDIR)/install_dir.o
	$(CC) -shared -Wl,-soname,$(SONAME) $(LDFLAGS) -o $(INSTALL_OBJDIR)/libaquila.so.$(VERSION) $(INSTALL_LIB_OBJS) $(PKG_LIBS)
	rm -f $(INSTALL_OBJDIR)/libaquila.a && ar rcs $(INSTALL_OBJDIR)/libaquila.a $(INSTALL_LIB_OBJS)

install: all install-lib
	install -d $(PREFIX)/lib/aquila $(PREFIX)/bin $(PREFIX)/include/aquila $(PREFIX)/lib/pkgconfig
	install -m 644 include/aquila/*.h $(PREFIX)/include/aquila/
	install -m 755 $(INSTALL_OBJDIR)/libaquila.so.$(VERSION) $(PREFIX)/lib/
	ln -sf libaquila.so.$(VERSION) $(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(PREFIX)/lib/libaquila.so
	install -m 644 $(INSTALL_OBJDIR)/libaquila.a $(PREFIX)/lib/
	install -m 755 $(wildcard $(COLIB)/*) $(PREFIX)/lib/aquila/
	install -m 755 $(TOOL_BINS) $(PREFIX)/bin/
	$(call write_pc,$(PREFIX),$${prefix}/lib,$${prefix}/include,$(PREFIX)/lib/pkgconfig/aquila.pc,$(if $(filter $(SYSTEM_PREFIXES),$(patsubst %/,%,$(PREFIX))),,-Wl$(comma)-rpath$(comma)$${libdir} ))
	$(if $(filter $(SYSTEM_PREFIXES),$(patsubst %/,%,$(PREFIX))),-ldconfig)

clean:
	rm -rf build build-tsan build-asan

-include $(shell find $(OBJDIR) -name '*.d' 2>/dev/null)
