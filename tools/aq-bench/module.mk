# aq-bench's train suite runs the training example's own step loop; its tasks
# suite measures StarPU and OpenMP beside Aquila.
$(BINDIR)/aq-bench: $(OBJDIR)/examples/train_fashion/trainer.o $(OBJDIR)/examples/train_fashion/fashion_data.o
$(OBJDIR)/tools/aq-bench/tasks.o: CFLAGS += -fopenmp $(shell pkg-config --cflags starpu-1.3 2>/dev/null)
$(BINDIR)/aq-bench: LDFLAGS += -fopenmp
$(BINDIR)/aq-bench: EXTRA_LIBS += $(shell pkg-config --libs starpu-1.3 2>/dev/null)
