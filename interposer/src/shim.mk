# libgpuslice.so: the LD_PRELOAD shim.
SHIM_SRCS := $(wildcard src/*.c)
SHIM_OBJS := $(patsubst src/%.c,$(BUILD)/obj/shim/%.o,$(SHIM_SRCS))

shim: $(LIB)/libgpuslice.so

$(BUILD)/obj/shim/%.o: src/%.c src/*.h src/hooks.def include/gpuslice/*.h \
		../kmod/include/uapi/gpuslice.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I../kmod/include/uapi -fPIC -fvisibility=hidden -c -o $@ $<

# -Bsymbolic: the shim's table must point at its own wrappers even when it
# is loaded after the real driver rather than preloaded.
$(LIB)/libgpuslice.so: $(SHIM_OBJS) | $(LIB)
	$(CC) $(CFLAGS) $(SOFLAGS) -Wl,-Bsymbolic -Wl,-soname,libgpuslice.so \
		-o $@ $^ -ldl -lpthread
