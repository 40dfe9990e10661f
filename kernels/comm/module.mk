# collectives-cpu.so: the CPU code object whose kernel starts a collective
# with its tensors' addresses (scheduler/ops_collective.c).
KCOMM_SO := $(COLIB)/collectives-cpu.so
all: $(KCOMM_SO)
$(KCOMM_SO): $(OBJDIR)/kernels/comm/call.o
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -o $@ $^
