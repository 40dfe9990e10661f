# aq-bench's train suite runs the training example's own step loop.
$(BINDIR)/aq-bench: $(OBJDIR)/examples/train_fashion/trainer.o $(OBJDIR)/examples/train_fashion/fashion_data.o
