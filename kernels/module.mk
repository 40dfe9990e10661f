# The GPU op library, one CUDA C source per op (kernels/cuda/*.cu), built
# into one code object per vendor:
#  - NVIDIA: kernels-cuda.fatbin with SASS for sm_80 and sm_90a, where the
#    CUDA toolkit is (nvcc at /usr/local/cuda). sm_90a rather than sm_90:
#    the same GPUs (compute capability 9.0), plus Hopper's wgmma, which the
#    bf16 matmul uses (kernels/cuda/wgmma.cuh);
#  - AMD: kernels-amdgcn.hsaco for gfx90a, where Debian's HIP toolchain is
#    (hipcc, rocm-device-libs; `apt-get install hipcc`). Debian's HIP 5.2
#    (clang 15) knows no gfx942, so MI300 is not built.
# Without a toolchain the build says so and goes on (those GPUs then have no
# op kernels). Both are built from one translation unit that includes every
# source: a fatbin or code object holds one module, and the sources keep
# their private names in per-file namespaces.
NVCC ?= /usr/local/cuda/bin/nvcc
HIPCC ?= $(shell command -v hipcc 2>/dev/null)
HIP_BUNDLER ?= $(lastword $(sort $(wildcard /usr/lib/llvm-*/bin/clang-offload-bundler)))
# The ResNet-shaped builds go last: a kernel's code placement in the module
# moves the kernels around it (the CNN step measured 1-3% slower with
# conv2d_x3.cu's kernels placed among the ones it runs, the same with them
# last), so later builds join at the end rather than shift the ones a
# step already runs.
KCUDA_LATE := kernels/cuda/conv2d_x3.cu kernels/cuda/conv2d_ffma.cu kernels/cuda/conv2d_winograd.cu kernels/cuda/conv2d_bf16_col.cu kernels/cuda/conv2d_ffma_col.cu kernels/cuda/conv2d_bf16_col_filter.cu kernels/cuda/conv2d_bf16_planes.cu
KCUDA_SRCS := $(filter-out $(KCUDA_LATE),$(sort $(wildcard kernels/cuda/*.cu))) $(KCUDA_LATE)
KCUDA_HDRS := $(wildcard kernels/cuda/*.cuh kernels/cuda/*.h) include/aquila/ops.h include/aquila/ops_gpu.h
KCUDA_ALL := $(BUILD)/obj/kernels/cuda/all.cu
KCUDA_FATBIN := $(COLIB)/kernels-cuda.fatbin
KAMD_HSACO := $(COLIB)/kernels-amdgcn.hsaco
KAMD_ARCH := gfx90a

$(KCUDA_ALL): $(KCUDA_SRCS) kernels/module.mk
	@mkdir -p $(@D)
	printf '#include "%s"\n' $(abspath $(KCUDA_SRCS)) > $@

ifneq ($(wildcard $(NVCC)),)
all: $(KCUDA_FATBIN)
$(KCUDA_FATBIN): $(KCUDA_ALL) $(KCUDA_HDRS)
	@mkdir -p $(@D)
	$(NVCC) -fatbin -O3 -Iinclude -Ikernels/cuda -gencode arch=compute_80,code=sm_80 \
	  -gencode arch=compute_90a,code=sm_90a -o $@ $<
else
$(info aquila: no CUDA toolkit at $(NVCC): kernels-cuda.fatbin is not built)
endif

ifneq ($(and $(HIPCC),$(HIP_BUNDLER)),)
all: $(KAMD_HSACO)
# hipcc --genco writes a clang offload bundle; the runtime loads the plain
# AMDGPU ELF inside it.
$(KAMD_HSACO): $(KCUDA_ALL) $(KCUDA_HDRS)
	@mkdir -p $(@D) $(BUILD)/obj/kernels/amdgcn
	$(HIPCC) --genco --offload-arch=$(KAMD_ARCH) -O3 -Iinclude -Ikernels/cuda -x hip $< \
	  -o $(BUILD)/obj/kernels/amdgcn/kernels.bundle
	$(HIP_BUNDLER) --unbundle --type=o --inputs=$(BUILD)/obj/kernels/amdgcn/kernels.bundle \
	  --targets=hipv4-amdgcn-amd-amdhsa--$(KAMD_ARCH) --outputs=$@
else
$(info aquila: no HIP toolchain (hipcc, clang-offload-bundler): kernels-amdgcn.hsaco is not built)
endif
