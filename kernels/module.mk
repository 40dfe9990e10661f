# The CUDA op library: one fatbin for sm_80 and sm_90, built where the CUDA
# toolkit is (nvcc at /usr/local/cuda); elsewhere the build says so and goes
# on (GPU agents then have no op kernels).
NVCC ?= /usr/local/cuda/bin/nvcc
KCUDA_SRCS := $(sort $(wildcard kernels/cuda/*.cu))
KCUDA_FATBIN := $(COLIB)/kernels-cuda.fatbin
ifneq ($(wildcard $(NVCC)),)
all: $(KCUDA_FATBIN)
# One translation unit of every op source: a fatbin holds one module.
$(BUILD)/obj/kernels/cuda/all.cu: $(KCUDA_SRCS)
	@mkdir -p $(@D)
	printf '#include "%s"\n' $(abspath $(KCUDA_SRCS)) > $@
$(KCUDA_FATBIN): $(BUILD)/obj/kernels/cuda/all.cu $(wildcard kernels/cuda/*.cuh) include/aquila/ops.h
	@mkdir -p $(@D)
	$(NVCC) -fatbin -O3 -Iinclude -Ikernels/cuda -gencode arch=compute_80,code=sm_80 \
	  -gencode arch=compute_90,code=sm_90 -o $@ $<
else
$(info aquila: no CUDA toolkit at $(NVCC): kernels-cuda.fatbin is not built)
endif
