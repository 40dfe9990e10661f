# make fuzz-code-object [FUZZ_SECONDS=60]: libFuzzer (clang, ASan + UBSan
# without recovery) over the CPU code-object reader (runtime/elf.c,
# runtime/drivers/cpu_elf.c), seeded with the test code objects; findings
# go to build/fuzz-code-object/ (copy a crash into tests/co-corpus/ once it
# is fixed: tests/runtime/code_object.c loads each). Not part of make test.
CO_FUZZ_DIR := $(BUILD)/fuzz-code-object
CO_FUZZ_SRCS := runtime/fuzz/code_object_fuzz.c runtime/elf.c runtime/drivers/cpu_elf.c runtime/status.c
.PHONY: fuzz-code-object
fuzz-code-object: $(CO_FUZZ_DIR)/code_object_fuzz $(TEST_DATA) $(KCPU_SO)
	mkdir -p $(CO_FUZZ_DIR)/corpus && cp $(TEST_DATA_DIR)/*.so $(KCPU_SO) $(CO_FUZZ_DIR)/corpus/
	cp tests/co-corpus/* $(CO_FUZZ_DIR)/corpus/ 2>/dev/null || true
	$< -max_total_time=$(FUZZ_SECONDS) -max_len=400000 -timeout=10 -rss_limit_mb=4096 \
	  -artifact_prefix=$(CO_FUZZ_DIR)/ $(CO_FUZZ_DIR)/corpus
$(CO_FUZZ_DIR)/code_object_fuzz: $(CO_FUZZ_SRCS) $(wildcard runtime/*.h runtime/drivers/*.h)
	@mkdir -p $(@D)
	@command -v clang >/dev/null || { echo "fuzz-code-object needs clang: apt-get install clang"; exit 1; }
	clang -g -O1 -D_GNU_SOURCE -Iinclude -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  -o $@ $(CO_FUZZ_SRCS)
