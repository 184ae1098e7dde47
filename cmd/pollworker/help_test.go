package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v3"
)

// TestHelpIsPlainText: no --help of the command tree shows a backtick
// (issue 22: sessions list --help showed "--wide sessions get", urfave/cli
// reading the backticks of a flag's usage as its placeholder, and the
// descriptions showed Markdown backticks).
func TestHelpIsPlainText(t *testing.T) {
	var paths [][]string
	var walk func(path []string, cmd *cli.Command)
	walk = func(path []string, cmd *cli.Command) {
		paths = append(paths, path)
		for _, sub := range cmd.Commands {
			walk(append(append([]string(nil), path...), sub.Name), sub)
		}
	}
	walk(nil, newApp(io.Discard, io.Discard, nil))
	require.Greater(t, len(paths), 15)
	for _, path := range paths {
		r := runApp(t, append(path, "--help")...)
		require.Equal(t, exitOK, r.code, "%v: %s", path, r.stderr)
		require.NotContains(t, r.stdout, "`", "%v --help", path)
	}
}
