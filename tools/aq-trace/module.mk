# make fuzz-trace [FUZZ_SECONDS=60]: libFuzzer (clang) over aq-trace's reader,
# seeded with the test corpus; new inputs go to build/fuzz-trace/, not the
# repository. Not part of make test.
FUZZ_SECONDS ?= 60
.PHONY: fuzz-trace
fuzz-trace: $(BUILD)/fuzz-trace/trace_fuzz
	mkdir -p $(BUILD)/fuzz-trace/corpus && cp tests/trace-corpus/* $(BUILD)/fuzz-trace/corpus/
	$< -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(BUILD)/fuzz-trace/corpus
$(BUILD)/fuzz-trace/trace_fuzz: tools/aq-trace/fuzz/trace_fuzz.c tools/aq-trace/trace_file.c tools/aq-trace/json.c
	@mkdir -p $(@D)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -Itools/aq-trace -o $@ $^
