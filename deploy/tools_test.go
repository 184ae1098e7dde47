package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// buildTool builds the command deploy/tools/<name> and returns its path.
// The tools live in a module of their own (deploy/tools/go.mod), so that
// the main module does not carry Helm or go-containerregistry; the build
// goes through the Go build cache, so only the first run on a machine
// compiles their dependencies. Where the tool cannot be built (its modules
// cannot be downloaded, say) the test is skipped with the reason, except
// under CI=true, where that fails it.
func buildTool(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, "./"+name)
	cmd.Dir = "tools"
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := "cannot build deploy/tools/" + name + " (cd deploy/tools && go build ./" + name + "): " + err.Error() + "\n" + string(out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg + "\nskipped outside CI; under CI=true this fails")
	}
	return bin
}

// buildPollworker builds cmd/pollworker and returns its path: static and
// -trimpath, as the image and GoReleaser build it, so that the packages
// compiled for one of these tests serve the others from the build cache.
func buildPollworker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pollworker")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/pollworker")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// cliSurface is what one pollworker command accepts: its flags (long and
// short, with the leading dashes) and the environment variables they read.
type cliSurface struct {
	flags, env map[string]bool
}

var (
	helpFlagRe = regexp.MustCompile(`(?m)^\s+(--[a-z0-9-]+)(?: [a-z]+)?(?:, (-[a-z0-9]+))?`)
	helpEnvRe  = regexp.MustCompile(`\$(POLLWORKER_[A-Z0-9_]+)`)
)

// surfaceOf reads `pollworker <command…> --help`: every option and
// environment variable listed, the global ones included.
func surfaceOf(t *testing.T, bin string, command ...string) cliSurface {
	t.Helper()
	out, err := exec.Command(bin, append(command, "--help")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	s := cliSurface{flags: map[string]bool{}, env: map[string]bool{}}
	for _, m := range helpFlagRe.FindAllStringSubmatch(string(out), -1) {
		s.flags[m[1]] = true
		if m[2] != "" {
			s.flags[m[2]] = true
		}
	}
	for _, m := range helpEnvRe.FindAllStringSubmatch(string(out), -1) {
		s.env[m[1]] = true
	}
	require.NotEmpty(t, s.flags, "pollworker %s --help lists no options", strings.Join(command, " "))
	return s
}

// requireAccepts checks that every flag in args and every POLLWORKER_*
// variable in env is one the command accepts.
func requireAccepts(t *testing.T, s cliSurface, what string, args []string, env []string) {
	t.Helper()
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(a, "=")
		require.True(t, s.flags[name], "%s runs with %s, which the binary does not accept", what, name)
	}
	for _, e := range env {
		if strings.HasPrefix(e, "POLLWORKER_") {
			require.True(t, s.env[e], "%s sets %s, which the binary does not read", what, e)
		}
	}
}
