# aq-bench's train suite runs the training library's step loop (the one
# examples/train_fashion runs); its tasks suite measures StarPU and OpenMP
# beside Aquila.
$(BINDIR)/aq-bench: $(TRAIN_LIB)
$(OBJDIR)/tools/aq-bench/tasks.o: CFLAGS += -fopenmp $(shell pkg-config --cflags starpu-1.3 2>/dev/null)
$(BINDIR)/aq-bench: LDFLAGS += -fopenmp
$(BINDIR)/aq-bench: EXTRA_LIBS += $(shell pkg-config --libs starpu-1.3 2>/dev/null)
