package readmecheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// command is one command line the docs show.
type command struct {
	where string   // page:line
	dir   string   // "" for the repository root, "bench" after cd bench
	args  []string // the words, the program first
}

// shellLangs are the fences whose blocks hold shell commands.
var shellLangs = []string{"sh", "bash", "shell", "console"}

// commandsOf returns the commands of the shell blocks of text and of its
// inline code spans that start with "pollworker " or "make ".
func commandsOf(path, text string) []command {
	var out []command
	for _, b := range blocks(text) {
		if !slices.Contains(shellLangs, b.lang) {
			continue
		}
		for i, line := range strings.Split(b.code, "\n") {
			out = append(out, splitLine(path, b.line+1+i, line)...)
		}
	}
	for i, line := range strings.Split(prose(text), "\n") {
		for _, m := range spanRE.FindAllStringSubmatch(line, -1) {
			if strings.HasPrefix(m[1], "pollworker ") || strings.HasPrefix(m[1], "make ") {
				out = append(out, splitLine(path, i+1, m[1])...)
			}
		}
	}
	return out
}

var spanRE = regexp.MustCompile("`([^`]+)`")

// splitLine splits one shell line into its commands (at ; | && & and
// before a # comment), following a leading cd.
func splitLine(path string, line int, s string) []command {
	if i := strings.Index(s, " #"); i >= 0 {
		s = s[:i]
	}
	if strings.HasPrefix(strings.TrimSpace(s), "#") {
		return nil
	}
	where := path + ":" + strconv.Itoa(line)
	var out []command
	dir := ""
	for _, part := range regexp.MustCompile(`&&|\|\||[;|&]`).Split(s, -1) {
		words := strings.Fields(strings.NewReplacer(`"`, "", `'`, "", "$(", "", ")", "").Replace(part))
		for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
			words = words[1:] // VAR=value prefix
		}
		if len(words) == 0 {
			continue
		}
		if words[0] == "cd" && len(words) > 1 {
			dir = words[1]
			continue
		}
		out = append(out, command{where: where, dir: dir, args: words})
	}
	return out
}

// pollworkerArgs returns the arguments of a pollworker invocation
// (pollworker, bin/pollworker, go run ./cmd/pollworker), or false.
func pollworkerArgs(c command) ([]string, bool) {
	a := c.args
	switch {
	case a[0] == "pollworker" || strings.HasSuffix(a[0], "/pollworker"):
		return a[1:], true
	case len(a) >= 3 && a[0] == "go" && a[1] == "run" && a[2] == "./cmd/pollworker" && c.dir == "":
		return a[3:], true
	}
	return nil, false
}

// cli is the command tree of the pollworker binary, read from its --help.
type cli struct {
	bin   string
	cache map[string]helpPage
}

// helpPage is what one command's --help lists.
type helpPage struct {
	commands map[string]bool
	flags    map[string]bool
}

var (
	commandLineRE = regexp.MustCompile(`^\s{3}(\S[^ ]*(?:, \S+)*)\s{2,}`)
	flagNameRE    = regexp.MustCompile(`(?:^|, )(--?[\w-]+)`)
)

// help runs the binary's --help for the command path and parses it.
func (c *cli) help(t *testing.T, path []string) helpPage {
	t.Helper()
	key := strings.Join(path, " ")
	if h, ok := c.cache[key]; ok {
		return h
	}
	out, err := exec.Command(c.bin, append(slices.Clone(path), "--help")...).CombinedOutput()
	require.NoError(t, err, "pollworker %s --help: %s", key, out)
	h := parseHelp(string(out))
	c.cache[key] = h
	return h
}

// parseHelp reads the subcommands and flags a --help output lists.
func parseHelp(out string) helpPage {
	h := helpPage{commands: map[string]bool{}, flags: map[string]bool{}}
	section := ""
	for _, line := range strings.Split(out, "\n") {
		if line != "" && !strings.HasPrefix(line, " ") {
			section = line
			continue
		}
		switch {
		case section == "COMMANDS:":
			if m := commandLineRE.FindStringSubmatch(line); m != nil {
				for _, name := range strings.Split(m[1], ", ") {
					h.commands[name] = true
				}
			}
		case strings.HasSuffix(section, "OPTIONS:"):
			column, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
			for _, m := range flagNameRE.FindAllStringSubmatch(column, -1) {
				h.flags[m[1]] = true
			}
		}
	}
	return h
}

// check walks args down the command tree: every word that names a
// subcommand descends, every flag must be one the command has.
func (c *cli) check(t *testing.T, where string, args []string) {
	t.Helper()
	var path []string
	h := c.help(t, path)
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-") && a != "-":
			name, _, _ := strings.Cut(a, "=")
			require.True(t, h.flags[name], "%s: pollworker %s has no flag %s", where, strings.Join(path, " "), name)
		case len(h.commands) > 0 && h.commands[a]:
			path = append(path, a)
			h = c.help(t, path)
		case placeholder(a):
		case len(h.commands) > 0 && len(path) == 0:
			require.Fail(t, "no such command", "%s: pollworker has no command %q", where, a)
		}
	}
}

// placeholder reports whether a word stands for something the reader
// fills in (<command>, SESSION, [--json], ...).
func placeholder(w string) bool {
	return strings.ContainsAny(w[:1], "<[.") || strings.ToUpper(w) == w && strings.ToLower(w) != w
}

var makeTargetRE = regexp.MustCompile(`(?m)^([a-zA-Z][\w-]*):`)

// TestCommands checks every command the README and the docs pages show:
// pollworker commands and flags exist (from the built binary's --help),
// make targets exist in the Makefile, and go run/build paths exist.
func TestCommands(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pollworker")
	build := exec.Command("go", "build", "-o", bin, "./cmd/pollworker")
	build.Dir = root
	build.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOPROXY=off")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	c := &cli{bin: bin, cache: map[string]helpPage{}}

	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	var targets []string
	for _, m := range makeTargetRE.FindAllStringSubmatch(string(makefile), -1) {
		targets = append(targets, m[1])
	}

	seen := 0
	for _, p := range pages(t) {
		for _, cmd := range commandsOf(p.path, p.text) {
			if args, ok := pollworkerArgs(cmd); ok {
				seen++
				c.check(t, cmd.where, args)
				continue
			}
			switch a := cmd.args; {
			case a[0] == "make":
				for _, target := range a[1:] {
					if !strings.Contains(target, "=") {
						require.Contains(t, targets, target, "%s: the Makefile has no target %s", cmd.where, target)
					}
				}
			case a[0] == "go" && len(a) > 2 && (a[1] == "run" || a[1] == "build"):
				for _, w := range a[2:] {
					if strings.HasPrefix(w, "./") {
						_, err := os.Stat(filepath.Join(root, cmd.dir, w))
						require.NoError(t, err, "%s: go %s %s: no such package (in %q)", cmd.where, a[1], w, cmd.dir)
					}
				}
			}
		}
	}
	require.Positive(t, seen, "no pollworker command found: the parser is broken")
}

func TestCommandsOf(t *testing.T) {
	text := "```sh\nbin/pollworker run --id w1 &   # a worker\nPOLLWORKER_X=1 pollworker status --watch 2s; make test\ncd bench && go run ./cmd/pollbench -quick\n```\n\nRun `pollworker check --json` or `make bench BENCHFLAGS=-quick`.\n"
	var got [][]string
	for _, c := range commandsOf("p.md", text) {
		got = append(got, append([]string{c.where, c.dir}, c.args...))
	}
	require.Equal(t, [][]string{
		{"p.md:2", "", "bin/pollworker", "run", "--id", "w1"},
		{"p.md:3", "", "pollworker", "status", "--watch", "2s"},
		{"p.md:3", "", "make", "test"},
		{"p.md:4", "bench", "go", "run", "./cmd/pollbench", "-quick"},
		{"p.md:7", "", "pollworker", "check", "--json"},
		{"p.md:7", "", "make", "bench", "BENCHFLAGS=-quick"},
	}, got)
}

func TestParseHelp(t *testing.T) {
	out := "NAME:\n   pollworker sessions\n\nCOMMANDS:\n   add      add a session\n   drain, cordon  hand off\n\nOPTIONS:\n   --file string, -f string  sessions file\n   --dry-run                 print --not-this\n\nGLOBAL OPTIONS:\n   --redis-url string  Redis (default: \"x\")\n"
	h := parseHelp(out)
	require.Equal(t, map[string]bool{"add": true, "drain": true, "cordon": true}, h.commands)
	require.Equal(t, map[string]bool{"--file": true, "-f": true, "--dry-run": true, "--redis-url": true}, h.flags)
}
