package e2e

import (
	"fmt"
	"time"

	"github.com/prometheus/procfs"
)

// ProcessCPU is the CPU time (user + system) process pid has used so far, from /proc.
func ProcessCPU(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

// ProcessPeakRSS is process pid's peak resident set size in bytes since it started.
func ProcessPeakRSS(pid int) (int64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	if st.VmHWM == 0 {
		return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return int64(st.VmHWM), nil
}
