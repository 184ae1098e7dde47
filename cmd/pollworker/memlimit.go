package main

import (
	"math"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// memLimitShare is the part of the container's memory limit a worker sets
// as its Go memory limit (GOMEMLIMIT) when the environment sets none: the
// collector works harder as the heap nears it, instead of the kernel
// killing the worker (and its leases expiring) past the limit; the rest is
// left for what is not Go heap (stacks, the runtime, the page cache).
const memLimitShare = 0.9

// cgroupMemoryFiles returns where this process's memory limit may be
// read, in order: the files of its own cgroup as /proc/self/cgroup names
// it (v2, then v1: a process not in a cgroup namespace), then those at the
// mount's root (a container sees its own cgroup there).
func cgroupMemoryFiles() []string {
	var files []string
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		files = cgroupFilesOf(string(b))
	}
	return append(files, "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
}

// cgroupFilesOf returns the memory limit files of the cgroups that a
// /proc/self/cgroup says the process is in ("0::/path" in v2,
// "N:memory:/path" in v1), beyond the root.
func cgroupFilesOf(procSelfCgroup string) []string {
	var files []string
	for _, line := range strings.Split(procSelfCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "/" || !strings.HasPrefix(parts[2], "/") || strings.Contains(parts[2], "..") {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			files = append(files, "/sys/fs/cgroup"+parts[2]+"/memory.max")
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			files = append(files, "/sys/fs/cgroup/memory"+parts[2]+"/memory.limit_in_bytes")
		}
	}
	return files
}

// setDefaultMemoryLimit sets the Go memory limit to memLimitShare of the
// container's memory limit (read from the first of files that holds one)
// unless getenv("GOMEMLIMIT") is set, and returns the limit in effect in
// bytes and where it came from: "GOMEMLIMIT", "cgroup" or "" (none).
func setDefaultMemoryLimit(getenv func(string) string, files []string) (limit int64, from string) {
	if getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT" // -1 reads the value the runtime parsed
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, ok := cgroupMemoryLimit(string(b)); ok {
			limit = int64(float64(n) * memLimitShare)
			debug.SetMemoryLimit(limit)
			return limit, "cgroup"
		}
	}
	return 0, ""
}

// cgroupMemoryLimit reads a cgroup memory limit file: a number of bytes,
// or none ("max" in v2; v1's "no limit" is a number near the largest
// int64, rounded down to a page).
func cgroupMemoryLimit(content string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(content), 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64/2 {
		return 0, false
	}
	return n, true
}
