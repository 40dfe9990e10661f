# Code objects the tests load: the test kernels, and the same built for an
# ABI version this runtime does not load.
TEST_DATA_DIR := $(BUILD)/tests/data
TEST_DATA += $(TEST_DATA_DIR)/test-kernels.so $(TEST_DATA_DIR)/test-kernels-v99.so \
             $(TEST_DATA_DIR)/not-aquila.so $(TEST_DATA_DIR)/test-kernels-no-ops.so \
             $(TEST_DATA_DIR)/test-kernels-bad-ops.so $(TEST_DATA_DIR)/test-kernels-bad-lr.so \
             $(TEST_DATA_DIR)/test-kernels-bad-fusion.so

$(TEST_DATA_DIR)/test-kernels.so: tests/data/test_kernels.c include/aquila/kernel.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 -O2 -fPIC -shared -fvisibility=hidden -o $@ $<
$(TEST_DATA_DIR)/test-kernels-v99.so: tests/data/test_kernels.c include/aquila/kernel.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 -O2 -fPIC -shared -fvisibility=hidden -DTEST_ABI_VERSION=99 -o $@ $<
# The same without an op table, and with op tables the loader refuses.
$(TEST_DATA_DIR)/test-kernels-no-ops.so: tests/data/test_kernels.c include/aquila/kernel.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 -O2 -fPIC -shared -fvisibility=hidden -DTEST_OP_TABLE=0 -o $@ $<
$(TEST_DATA_DIR)/test-kernels-bad-ops.so: tests/data/test_kernels.c include/aquila/kernel.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 -O2 -fPIC -shared -fvisibility=hidden -DTEST_OP_TABLE=2 -o $@ $<
$(TEST_DATA_DIR)/test-kernels-bad-lr.so: tests/data/test_kernels.c include/aquila/kernel.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 -O2 -fPIC -shared -fvisibility=hidden -DTEST_OP_TABLE=3 -o $@ $<
$(TEST_DATA_DIR)/test-kernels-bad-fusion.so: tests/data/test_kernels.c include/aquila/kernel.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 -O2 -fPIC -shared -fvisibility=hidden -DTEST_OP_TABLE=4 -o $@ $<
# A valid shared object that is not an Aquila code object.
$(TEST_DATA_DIR)/not-aquila.so: tests/data/not_aquila.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -fPIC -shared -o $@ $<

# The data-loader tests link the training library's loader itself.
$(BUILD)/tests/examples: $(TRAIN_LIB)

# The GPU tests' own kernels (a planted faulting kernel among them), where
# the CUDA toolkit is.
ifneq ($(wildcard $(NVCC)),)
TEST_DATA += $(TEST_DATA_DIR)/test-kernels-gpu.fatbin
$(TEST_DATA_DIR)/test-kernels-gpu.fatbin: tests/data/test_kernels_gpu.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -o $@ $<
endif

# The trace tests read traces with aq-trace's own reader.
$(BUILD)/tests/trace: $(OBJDIR)/tools/aq-trace/json.o $(OBJDIR)/tools/aq-trace/trace_file.o

# The same GPU test kernels for sm_80 only, without PTX: a fatbin with no
# code for an sm_90 GPU (tests/gpu/memory.c expects a clear error for it).
ifneq ($(wildcard $(NVCC)),)
TEST_DATA += $(TEST_DATA_DIR)/test-kernels-gpu-sm80.fatbin
$(TEST_DATA_DIR)/test-kernels-gpu-sm80.fatbin: tests/data/test_kernels_gpu.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin -gencode arch=compute_80,code=sm_80 -o $@ $<
endif
