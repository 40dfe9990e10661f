# make fuzz-graph [FUZZ_SECONDS=60]: libFuzzer (clang, ASan + UBSan without
# recovery, LeakSanitizer) over the public graph API: each input is a
# program of graph-building, instantiate and run calls
# (scheduler/fuzz/graph_fuzz.c). The library is compiled again with clang
# for it, under build/fuzz-graph/obj; the op library and test kernels are
# the ordinary build's. Seeds: tests/graph-corpus/; findings go to
# build/fuzz-graph/ (once fixed, a regression test in tests/graph). Not
# part of make test.
GF_DIR  := $(BUILD)/fuzz-graph
GF_OBJS := $(LIB_SRCS:%.c=$(GF_DIR)/obj/%.o)
GF_CFLAGS := -g -O1 -std=c11 -pthread -D_GNU_SOURCE -DAQ_VERSION_STRING='"$(VERSION)"' -Iinclude -I. \
             -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -MMD -MP
.PHONY: fuzz-graph
fuzz-graph: $(GF_DIR)/graph_fuzz $(TEST_DATA) $(KCPU_SO)
	mkdir -p $(GF_DIR)/corpus $(GF_DIR)/perf && cp tests/graph-corpus/* $(GF_DIR)/corpus/
	AQ_CODE_OBJECT_PATH=$(abspath $(COLIB)):$(abspath $(TEST_DATA_DIR)) AQ_PERF_DIR=$(abspath $(GF_DIR)/perf) GRAPH_FUZZ_ARTIFACTS=$(GF_DIR) \
	  ASAN_OPTIONS=allocator_may_return_null=1:fast_unwind_on_malloc=0 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tools/lsan.supp:print_suppressions=0 \
	  $< -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=60 -rss_limit_mb=4096 \
	  -artifact_prefix=$(GF_DIR)/ $(GF_DIR)/corpus
$(GF_DIR)/obj/%.o: %.c
	@mkdir -p $(@D)
	@command -v clang >/dev/null || { echo "fuzz-graph needs clang: apt-get install clang"; exit 1; }
	clang $(GF_CFLAGS) $(PKG_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(GF_DIR)/graph_fuzz: $(GF_DIR)/obj/scheduler/fuzz/graph_fuzz.o $(GF_OBJS)
	clang -fsanitize=fuzzer,address,undefined -pthread -o $@ $^ $(PKG_LIBS)
-include $(wildcard $(GF_DIR)/obj/*/*.d $(GF_DIR)/obj/*/*/*.d)
