# The demo's stand-in application.
demo: $(BIN)/gsdemo-worker

$(BIN)/gsdemo-worker: demo/worker.c include/gpuslice/*.h | $(BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl
