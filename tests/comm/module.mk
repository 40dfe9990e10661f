# comm-ranks: the program each rank of the mpirun tests runs (tests/comm/ranks),
# plain C without Criterion so that it also runs on the GPU machines.
COMM_RANKS := $(BUILD)/tests/comm-ranks
$(eval $(call program,$(COMM_RANKS),tests/comm/ranks,$$(PKG_LIBS) -lm))
$(BUILD)/tests/comm: | $(COMM_RANKS)
