# examples/user_kernels: its code object, my-kernels.so, is built beside the
# program (build/examples/), which loads it from there by default.
USER_KERNELS_SO := $(BUILD)/examples/my-kernels.so
$(USER_KERNELS_SO): examples/user_kernels/kernels/my_kernels.c examples/user_kernels/kernels/my_kernels.h \
                    include/aquila/kernel.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 -O2 -fPIC -shared -fvisibility=hidden -o $@ $<
all: $(USER_KERNELS_SO)
$(BUILD)/examples/user_kernels: $(USER_KERNELS_SO)
