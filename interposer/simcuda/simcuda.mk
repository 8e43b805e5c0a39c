# Simulated CUDA driver: libcuda.so.1 and libnvidia-ml.so.1, built from
# simcuda/. Included by interposer/Makefile, which defines BUILD, LIB, CC,
# CFLAGS and SOFLAGS. The shared-state code (state.c, config.c) is compiled
# once and linked into both libraries.

SIM_OBJDIR := $(BUILD)/obj/simcuda
SIM_COMMON := state config
# The NVIDIA device nodes, opened as the real driver opens them.
SIM_COMMON += nodes
SIM_CUDA := init device context memory array vmm pool stream event launch \
	procaddr table limit module capture graph graph_exec
# CUDA 13 pools by location and allocation type.
SIM_CUDA += pool_loc
# CUDA_VISIBLE_DEVICES: ordinals to physical devices.
SIM_CUDA += visible
# Compute preemption (SIMCUDA_PREEMPT_US).
SIM_CUDA += preempt
SIM_NVML := nvml nvml_event
# Loaded images' device memory; NVML's running processes.
SIM_CUDA += module_mem
SIM_NVML += nvml_proc

SIM_CUDA_OBJS := $(addprefix $(SIM_OBJDIR)/,$(addsuffix .o,$(SIM_CUDA) $(SIM_COMMON)))
SIM_NVML_OBJS := $(addprefix $(SIM_OBJDIR)/,$(addsuffix .o,$(SIM_NVML) $(SIM_COMMON)))
SIM_LDLIBS := -pthread -lrt
# Bound locally, as the real driver is: its own calls and the addresses it
# hands out never resolve to an interposer's symbols.
SOFLAGS_SIM = $(SOFLAGS) -Wl,-Bsymbolic

.PHONY: sim
sim: $(LIB)/libcuda.so.1 $(LIB)/libcuda.so \
	$(LIB)/libnvidia-ml.so.1 $(LIB)/libnvidia-ml.so $(BIN)/simcuda-xid

$(SIM_OBJDIR):
	mkdir -p $@

$(SIM_OBJDIR)/%.o: simcuda/%.c | $(SIM_OBJDIR)
	$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -MMD -MP -c -o $@ $<

$(LIB)/libcuda.so.1: $(SIM_CUDA_OBJS) | $(LIB)
	$(CC) $(CFLAGS) $(SOFLAGS_SIM) -Wl,-soname,libcuda.so.1 -o $@ $^ $(SIM_LDLIBS)

$(LIB)/libnvidia-ml.so.1: $(SIM_NVML_OBJS) | $(LIB)
	$(CC) $(CFLAGS) $(SOFLAGS_SIM) -Wl,-soname,libnvidia-ml.so.1 -o $@ $^ $(SIM_LDLIBS)

# The XID injector of tests, linked to the simulated NVML next to it.
$(BIN)/simcuda-xid: simcuda/xid_tool.c $(LIB)/libnvidia-ml.so.1 | $(BIN)
	$(CC) $(CFLAGS) -Isimcuda -o $@ $< -L$(LIB) -l:libnvidia-ml.so.1 \
		-Wl,-rpath,'$$ORIGIN/../lib'

$(LIB)/libcuda.so: | $(LIB)
	ln -sfn libcuda.so.1 $@

$(LIB)/libnvidia-ml.so: | $(LIB)
	ln -sfn libnvidia-ml.so.1 $@

-include $(wildcard $(SIM_OBJDIR)/*.d)
