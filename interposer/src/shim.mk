# libgpuslice.so: the LD_PRELOAD shim, with the scheduler core of
# kmod/core compiled in (the no-module mode's schedule file), as pkg/sched
# compiles it: one implementation.
SHIM_SRCS := $(wildcard src/*.c)
SHIM_OBJS := $(patsubst src/%.c,$(BUILD)/obj/shim/%.o,$(SHIM_SRCS)) \
	$(BUILD)/obj/shim/core/gs_sched.o $(BUILD)/obj/shim/core/gs_drain.o
# dlsym's entry point (dlsym_entry.S): libc must see the caller's return
# address, which no C function can guarantee.
SHIM_OBJS += $(BUILD)/obj/shim/dlsym_entry.o
SHIM_INC := -I../kmod/include/uapi -I../kmod/core

shim: $(LIB)/libgpuslice.so

$(BUILD)/obj/shim/%.o: src/%.c src/*.h src/hooks.def include/gpuslice/*.h \
		../kmod/include/uapi/gpuslice.h ../kmod/core/*.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SHIM_INC) -fPIC -fvisibility=hidden -c -o $@ $<

$(BUILD)/obj/shim/dlsym_entry.o: src/dlsym_entry.S
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -c -o $@ $<

$(BUILD)/obj/shim/core/%.o: ../kmod/core/%.c ../kmod/core/*.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SHIM_INC) -fPIC -fvisibility=hidden -c -o $@ $<

# -Bsymbolic: the shim's table must point at its own wrappers even when it
# is loaded after the real driver rather than preloaded.
$(LIB)/libgpuslice.so: $(SHIM_OBJS) | $(LIB)
	$(CC) $(CFLAGS) $(SOFLAGS) -Wl,-Bsymbolic -Wl,-soname,libgpuslice.so \
		-o $@ $^ -ldl -lpthread
