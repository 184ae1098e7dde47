package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuCage holds processes to a share of the CPUs: a cgroup with a CPU
// quota (cgroup v2's cpu.max, or v1's cfs quota), with a 10 ms period so
// that a process at its quota is throttled in short slices. The overload
// scenario puts each CPU-bound worker in one of its own, so that a worker
// has a capacity of its own and a peer that joins adds room even on a
// machine of two cores. It needs root and a writable cgroup hierarchy.
type cpuCage struct{ dir string }

const cagePeriodMicros = 10000

// newCPUCage makes a cgroup named name holding its processes to cpus CPUs.
func newCPUCage(name string, cpus float64) (*cpuCage, error) {
	quota := int(cpus * cagePeriodMicros)
	if quota < 1000 {
		return nil, fmt.Errorf("cpu cage: %v CPUs is below 1 ms a period", cpus)
	}
	// cgroup v2: the unified hierarchy with the cpu controller delegated.
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(ctl), "cpu") {
		_ = os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+cpu"), 0o644)
		dir := filepath.Join("/sys/fs/cgroup", name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cpu cage: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, cagePeriodMicros)), 0o644); err != nil {
			_ = os.Remove(dir)
			return nil, fmt.Errorf("cpu cage: %w", err)
		}
		return &cpuCage{dir: dir}, nil
	}
	// cgroup v1: the cpu controller's own hierarchy.
	root := "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err != nil {
		return nil, errors.New("cpu cage: no cgroup cpu controller (v1 or v2) here")
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cpu cage: %w", err)
	}
	for _, kv := range [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cagePeriodMicros)}, {"cpu.cfs_quota_us", strconv.Itoa(quota)}} {
		if err := os.WriteFile(filepath.Join(dir, kv[0]), []byte(kv[1]), 0o644); err != nil {
			_ = os.Remove(dir)
			return nil, fmt.Errorf("cpu cage: %w", err)
		}
	}
	return &cpuCage{dir: dir}, nil
}

// add moves the process pid into the cage.
func (c *cpuCage) add(pid int) error {
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("cpu cage: %w", err)
	}
	return nil
}

// close removes the cage, once its processes have exited.
func (c *cpuCage) close() error { return os.Remove(c.dir) }
