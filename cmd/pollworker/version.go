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
// Without -ldflags, version is "dev" and commit and date come from the
// version control information that go build embeds, if any.
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// buildInfo returns commit and date, falling back to the embedded VCS
// information, then to "unknown".
func buildInfo() (c, d string) {
	c, d = commit, date
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && c == "":
				c = s.Value
			case s.Key == "vcs.time" && d == "":
				d = s.Value
			}
		}
	}
	if c == "" {
		c = "unknown"
	}
	if d == "" {
		d = "unknown"
	}
	return c, d
}

// versionString is the one-line version report.
func versionString() string {
	c, d := buildInfo()
	return fmt.Sprintf("%s (commit %s, built %s, %s %s/%s)", version, c, d, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print version, commit and build date",
		Action: action(func(_ context.Context, cmd *cli.Command) error {
			c, d := buildInfo()
			w := cmd.Root().Writer
			fmt.Fprintf(w, "version: %s\ncommit:  %s\nbuilt:   %s\ngo:      %s %s/%s\n", version, c, d, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		}),
	}
}
