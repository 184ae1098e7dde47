//go:build !linux

package main

import "time"

// threadCPU runs f and returns its wall time twice: a thread's CPU time is
// read on Linux only.
func threadCPU(f func()) (cpu, wall time.Duration) {
	t0 := time.Now()
	f()
	wall = time.Since(t0)
	return wall, wall
}

// processCPU is not read outside Linux.
func processCPU() (time.Duration, bool) { return 0, false }
