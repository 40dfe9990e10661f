# The graph tests drive the scheduler's pure parts (memory planning by
# lifetime, epilogue fusion, and the plan both rest on) directly: they link
# those objects themselves, since libaquila hides its internal symbols
# (tests/graph/units.h).
$(BUILD)/tests/graph: $(OBJDIR)/scheduler/memplan.o $(OBJDIR)/scheduler/fuse.o $(OBJDIR)/scheduler/plan.o \
                      $(OBJDIR)/scheduler/heft.o
