package testenv

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// The machine's timing turn: one flock on build/.timing.lock, held by
// this process while any of its tests holds a turn.
var timing struct {
	mu   sync.Mutex
	held int
	file *os.File
}

// TimingTurn gives t the machine for timing: an exclusive lock that the
// qemu guest (kmod/guest, whose emulator runs at nice -10 on every core
// it can get) holds for its boot, and the tests that measure shares of
// wall time on the host (the shim's gate) hold for theirs, so that
// neither measures the other. go test runs packages in parallel; with
// the guest's emulator beside them, tenants that should split 25/25/50
// got 16/16/38 % of wall time, starved of the CPU to launch. Released
// when t ends; nested turns in one process share the lock.
func TimingTurn(t testing.TB) {
	t.Helper()
	if err := timingAcquire(); err != nil {
		t.Fatalf("the timing lock: %v", err)
	}
	t.Cleanup(timingRelease)
}

func timingAcquire() error {
	timing.mu.Lock()
	defer timing.mu.Unlock()
	if timing.held > 0 {
		timing.held++
		return nil
	}
	if err := os.MkdirAll(Build(), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(Build(), ".timing.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return err
	}
	timing.file, timing.held = f, 1
	return nil
}

func timingRelease() {
	timing.mu.Lock()
	defer timing.mu.Unlock()
	if timing.held--; timing.held == 0 {
		timing.file.Close() // closing drops the flock
		timing.file = nil
	}
}
