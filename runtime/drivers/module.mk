# The runtime tests drive the rocr driver's pure parts (packet forwarding,
# the in-flight signal table, hsaco kernel descriptors) on CPU memory: they
# link that object itself, since libaquila hides its internal symbols.
$(BUILD)/tests/runtime: $(OBJDIR)/runtime/drivers/rocr_packet.o
