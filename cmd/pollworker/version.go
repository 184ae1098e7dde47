package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v3"
)

// Build information, set with
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=$(git rev-parse HEAD) -X main.date=$(date -u +%FT%TZ)"
//
// What -ldflags leaves unset comes from the build information the Go
// toolchain embeds (see buildStamp).
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// build is what the binary knows of its origin.
type build struct {
	Version, Commit, Date string
}

// buildStamp fills what -ldflags left unset from bi, the module's embedded
// build information (nil when there is none): the module version, which
// `go install …@v1.2.3` sets (not "(devel)", which a plain go build of a
// checkout reports), then vcs.revision ("+modified" when vcs.modified says
// the work tree had changes), vcs.time. What neither knows reads "unknown";
// a plain go build stamps the VCS settings only from a git checkout and
// without -buildvcs=false.
func buildStamp(ldVersion, ldCommit, ldDate string, bi *debug.BuildInfo) build {
	b := build{Version: ldVersion, Commit: ldCommit, Date: ldDate}
	if bi != nil {
		if v := bi.Main.Version; b.Version == "dev" && v != "" && v != "(devel)" {
			b.Version = v
		}
		var revision, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				if b.Date == "" {
					b.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value
			}
		}
		if b.Commit == "" && revision != "" {
			b.Commit = revision
			if modified == "true" {
				b.Commit += "+modified"
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.Date == "" {
		b.Date = "unknown"
	}
	return b
}

// currentBuild is buildStamp of this binary.
func currentBuild() build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return buildStamp(version, commit, date, bi)
}

// versionString is the one-line version report.
func versionString() string {
	b := currentBuild()
	return fmt.Sprintf("%s (commit %s, built %s, %s %s/%s)", b.Version, b.Commit, b.Date, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print version, commit and build date",
		Action: action(func(_ context.Context, cmd *cli.Command) error {
			b := currentBuild()
			w := cmd.Root().Writer
			fmt.Fprintf(w, "version: %s\ncommit:  %s\nbuilt:   %s\ngo:      %s %s/%s\n", b.Version, b.Commit, b.Date, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		}),
	}
}
