package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBuildStamp: what -ldflags leaves unset comes from the embedded build
// information: the module version of `go install …@v1.2.3`, the VCS
// revision (marked when the tree was modified) and time (issue 22: a plain
// go build said "version dev (commit unknown)").
func TestBuildStamp(t *testing.T) {
	vcs := func(rev, at, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: at}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name                string
		ldVersion, ldCommit string
		ldDate              string
		give                *debug.BuildInfo
		want                build
	}{
		{name: "no build info", ldVersion: "dev", want: build{"dev", "unknown", "unknown"}},
		{name: "devel without vcs", ldVersion: "dev", give: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			want: build{"dev", "unknown", "unknown"}},
		{name: "go install at a version", ldVersion: "dev", give: &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}},
			want: build{"v1.2.3", "unknown", "unknown"}},
		{name: "checkout", ldVersion: "dev",
			give: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("abc123", "2026-11-25T22:00:00Z", "false")},
			want: build{"dev", "abc123", "2026-11-25T22:00:00Z"}},
		{name: "modified checkout", ldVersion: "dev",
			give: &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261125220000-abc123+dirty"}, Settings: vcs("abc123", "2026-11-25T22:00:00Z", "true")},
			want: build{"v0.0.0-20261125220000-abc123+dirty", "abc123+modified", "2026-11-25T22:00:00Z"}},
		{name: "ldflags win", ldVersion: "v2.0.0", ldCommit: "def", ldDate: "2026-01-01",
			give: &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: vcs("abc123", "2026-11-25T22:00:00Z", "true")},
			want: build{"v2.0.0", "def", "2026-01-01"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, buildStamp(tt.ldVersion, tt.ldCommit, tt.ldDate, tt.give))
		})
	}
}
