package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCgroupMemoryLimit(t *testing.T) {
	tests := []struct {
		content string
		want    int64
		ok      bool
	}{
		{"268435456\n", 268435456, true},
		{"max\n", 0, false},                              // v2: no limit
		{"9223372036854771712\n", 0, false},              // v1: no limit
		{strconv.FormatInt(math.MaxInt64, 10), 0, false}, // no limit either
		{"", 0, false},
		{"0\n", 0, false},
		{"-1\n", 0, false},
		{"garbage", 0, false},
	}
	for _, tt := range tests {
		got, ok := cgroupMemoryLimit(tt.content)
		require.Equal(t, tt.ok, ok, "%q", tt.content)
		require.Equal(t, tt.want, got, "%q", tt.content)
	}
}

func TestSetDefaultMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	dir := t.TempDir()
	v2 := filepath.Join(dir, "memory.max")
	v1 := filepath.Join(dir, "memory.limit_in_bytes")
	require.NoError(t, os.WriteFile(v2, []byte("max\n"), 0o600))
	require.NoError(t, os.WriteFile(v1, []byte("268435456\n"), 0o600))
	noEnv := func(string) string { return "" }

	limit, from := setDefaultMemoryLimit(noEnv, []string{v2, v1})
	require.Equal(t, "cgroup", from)
	require.Equal(t, int64(241591910), limit, "0.9 of 256 MiB")
	require.Equal(t, limit, debug.SetMemoryLimit(-1), "set in the runtime")

	debug.SetMemoryLimit(math.MaxInt64)
	limit, from = setDefaultMemoryLimit(noEnv, []string{v2, filepath.Join(dir, "missing")})
	require.Equal(t, "", from, "no limit anywhere")
	require.Zero(t, limit)
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "left alone")

	limit, from = setDefaultMemoryLimit(func(k string) string {
		if k == "GOMEMLIMIT" {
			return "100MiB"
		}
		return ""
	}, []string{v1})
	require.Equal(t, "GOMEMLIMIT", from, "the environment wins")
	require.Equal(t, int64(math.MaxInt64), limit, "the runtime's value, not the cgroup's")
}

func TestCgroupFilesOf(t *testing.T) {
	require.Equal(t, []string{"/sys/fs/cgroup/kubepods/pod1/c1/memory.max"}, cgroupFilesOf("0::/kubepods/pod1/c1\n"))
	require.Equal(t, []string{"/sys/fs/cgroup/memory/process_api/2a30/memory.limit_in_bytes"},
		cgroupFilesOf("9:name=systemd:/\n4:memory:/process_api/2a30\n0::/\n"))
	require.Equal(t, []string{"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"}, cgroupFilesOf("3:cpu,memory:/docker/abc\n"))
	require.Empty(t, cgroupFilesOf("0::/\n4:memory:/\n"), "the root: read at the mount's root")
	require.Empty(t, cgroupFilesOf("0::/../../etc\ngarbage\n"))
}
