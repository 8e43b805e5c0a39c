# The end-to-end test programs, built into $(BIN). Included by
# interposer/Makefile (BUILD, LIB, BIN, CC, CFLAGS come from there).
#
#  gstest    reaches the driver with dlopen + dlsym, as frameworks do; the
#            Go tests in interposer/ drive it (see tests/main.c).
#  gsdirect  is linked against libcuda.so.1: the LD_PRELOAD-by-symbol path.

TESTS_OBJDIR := $(BUILD)/obj/tests
GSTEST_SRCS := $(filter-out tests/direct.c,$(wildcard tests/*.c))
GSTEST_OBJS := $(patsubst tests/%.c,$(TESTS_OBJDIR)/%.o,$(GSTEST_SRCS))

tests: $(BIN)/gstest $(BIN)/gsdirect

$(TESTS_OBJDIR)/%.o: tests/%.c tests/common.h include/gpuslice/*.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# schedinfo reads the no-module schedule file's layout, the shim's.
$(TESTS_OBJDIR)/schedinfo.o: CFLAGS += -Isrc -I../kmod/core -I../kmod/include/uapi
$(TESTS_OBJDIR)/schedinfo.o: src/sched_file_layout.h ../kmod/core/gs_sched.h
# span checks the fence's busy-span arithmetic, the shim's own header.
$(TESTS_OBJDIR)/span.o: CFLAGS += -Isrc
$(TESTS_OBJDIR)/span.o: src/gate_span.h

$(BIN)/gstest: $(GSTEST_OBJS) | $(BIN)
	$(CC) $(CFLAGS) -o $@ $^ -ldl

$(BIN)/gsdirect: $(TESTS_OBJDIR)/direct.o $(LIB)/libcuda.so.1 | $(BIN)
	$(CC) $(CFLAGS) -o $@ $< -L$(LIB) -l:libcuda.so.1

# Libraries the tests put beside the shim (tests/lib/):
#  libgswrap.so   a second preloaded library wrapping malloc and puts
#                 through dlsym(RTLD_NEXT), as UCX and profilers do;
#  wsl/           the WSL2 driver's layout: a stub libcuda.so.1 forwarding
#                 each call to the driver it dlopen()s from driver/ (here a
#                 copy of the simulated driver, libcuda.so.1.1).
tests: $(LIB)/libgswrap.so $(LIB)/wsl/libcuda.so.1 \
	$(LIB)/wsl/driver/libcuda.so.1.1

$(LIB)/libgswrap.so: tests/lib/gswrap.c | $(LIB)
	$(CC) $(CFLAGS) $(SOFLAGS) -o $@ $< -ldl

$(LIB)/wsl/libcuda.so.1: tests/lib/wslstub.c include/gpuslice/*.h | $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SOFLAGS) -Wl,-soname,libcuda.so.1 -o $@ $< -ldl -lpthread

$(LIB)/wsl/driver/libcuda.so.1.1: $(LIB)/libcuda.so.1
	@mkdir -p $(dir $@)
	cp $< $@
