# aq-trace's reader and analyses (everything but main.c) also go into the
# trace tests, which read the traces the recorder writes, and the fuzzer.
AQ_TRACE_LIB_SRCS := $(filter-out tools/aq-trace/main.c,$(wildcard tools/aq-trace/*.c))
$(BUILD)/tests/trace: $(AQ_TRACE_LIB_SRCS:%.c=$(OBJDIR)/%.o)

# make fuzz-trace [FUZZ_SECONDS=60]: libFuzzer (clang, ASan + UBSan without
# recovery) over aq-trace's reader, analysis, summary, SVG and diff, seeded
# with the test corpus; what it finds goes to build/fuzz-trace/, not the
# repository (copy a crash into tests/trace-corpus/ once it is fixed). Not
# part of make test.
FUZZ_SECONDS ?= 60
FUZZ_DIR := $(BUILD)/fuzz-trace
.PHONY: fuzz-trace
fuzz-trace: $(FUZZ_DIR)/trace_fuzz
	mkdir -p $(FUZZ_DIR)/corpus && cp tests/trace-corpus/* $(FUZZ_DIR)/corpus/
	$< -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
	  -dict=tools/aq-trace/fuzz/trace.dict -artifact_prefix=$(FUZZ_DIR)/ $(FUZZ_DIR)/corpus
$(FUZZ_DIR)/trace_fuzz: tools/aq-trace/fuzz/trace_fuzz.c $(AQ_TRACE_LIB_SRCS) $(wildcard tools/aq-trace/*.h)
	@mkdir -p $(@D)
	@command -v clang >/dev/null || { echo "fuzz-trace needs clang: apt-get install clang"; exit 1; }
	clang -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  -Itools/aq-trace -o $@ $(filter %.c,$^) -lm
