package main

import (
	"runtime"
	"syscall"
	"time"
)

// threadCPU runs f on a locked OS thread and returns the CPU time that
// thread spent in it (RUSAGE_THREAD): on a shared machine, the planner's
// own cost, which its wall time overstates by the time it waited for a
// core (the collector's work on other threads is left out).
func threadCPU(f func()) (cpu, wall time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const rusageThread = 1 // RUSAGE_THREAD
	var a, b syscall.Rusage
	okA := syscall.Getrusage(rusageThread, &a) == nil
	t0 := time.Now()
	f()
	wall = time.Since(t0)
	if !okA || syscall.Getrusage(rusageThread, &b) != nil {
		return wall, wall
	}
	used := func(r syscall.Rusage) int64 { return r.Utime.Nano() + r.Stime.Nano() }
	return time.Duration(used(b) - used(a)), wall
}

// processCPU is the CPU time this process has used so far.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
