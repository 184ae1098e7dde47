// Package readmecheck holds the tests of the README and the pages under
// docs/: every Go program they show builds and vets against this module,
// every other Go block parses, every YAML block parses, every pollworker
// command they show names commands and flags the binary has, every make
// target exists, every docs page is linked from the README and every
// relative link resolves.
package readmecheck

import (
	"fmt"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// embeddingSnippet returns the first ```go block under the heading
// "## Embedding" of readme.
func embeddingSnippet(t *testing.T, readme string) string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Embedding\n")
	require.True(t, ok, `README.md has no "## Embedding" section`)
	if next := strings.Index(section, "\n## "); next >= 0 {
		section = section[:next]
	}
	_, block, ok := strings.Cut(section, "\n```go\n")
	require.True(t, ok, "the Embedding section has no ```go block")
	code, _, ok := strings.Cut(block, "\n```\n")
	require.True(t, ok, "the ```go block of the Embedding section is not closed")
	return code + "\n"
}

// TestEmbeddingSnippetBuilds builds the README's embedding example as a
// program of this module, offline (issue 10, item 12: it used undefined
// names and had no imports). The snippet must be a complete main package,
// since users copy it whole.
func TestEmbeddingSnippetBuilds(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	buildSnippet(t, embeddingSnippet(t, string(readme)))
}

// TestGoBlocks checks every ```go block of the README and the docs pages:
// a complete program (package main) builds and vets as
// TestEmbeddingSnippetBuilds does; any other block (an API listing, a few
// statements) must at least parse, as declarations or as statements.
func TestGoBlocks(t *testing.T) {
	programs := 0
	for _, p := range pages(t) {
		for _, b := range blocks(p.text) {
			if b.lang != "go" {
				continue
			}
			name := fmt.Sprintf("%s:%d", p.path, b.line)
			if strings.HasPrefix(b.code, "package main\n") {
				programs++
				if p.path == "README.md" {
					continue // TestEmbeddingSnippetBuilds
				}
				t.Run(name, func(t *testing.T) { buildSnippet(t, b.code) })
				continue
			}
			require.NoError(t, parseFragment(b.code), "%s: the ```go block does not parse", name)
		}
	}
	require.Positive(t, programs)
}

// parseFragment parses code as Go declarations or, failing that, as the
// statements of a function body.
func parseFragment(code string) error {
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\n"+code, 0); err == nil {
		return nil
	}
	_, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+code+"\n}\n", 0)
	return err
}

// TestYAMLBlocks: every ```yaml block of the README and the docs pages
// parses.
func TestYAMLBlocks(t *testing.T) {
	for _, p := range pages(t) {
		for _, b := range blocks(p.text) {
			if b.lang != "yaml" && b.lang != "yml" {
				continue
			}
			var v any
			require.NoError(t, yaml.Unmarshal([]byte(b.code), &v), "%s:%d: the ```yaml block does not parse", p.path, b.line)
		}
	}
}

func TestParseFragment(t *testing.T) {
	require.NoError(t, parseFragment("type I interface {\n\tF() error\n}\nfunc (s *S) G() int\n"))
	require.NoError(t, parseFragment("e, err := f()\ngo e.Run(ctx)\n"))
	require.Error(t, parseFragment("func (\n"))
}

// buildSnippet builds and vets code, a README snippet that must be a
// complete, gofmt-formatted main package of this module.
func buildSnippet(t *testing.T, code string) {
	t.Helper()
	require.True(t, strings.HasPrefix(code, "package main\n"), "the snippet is a complete program: it starts with package main")
	formatted, err := format.Source([]byte(code))
	require.NoError(t, err)
	require.Equal(t, string(formatted), code, "the snippet is gofmt-formatted")

	dir := t.TempDir()
	src := filepath.Join(dir, "embedding.go")
	require.NoError(t, os.WriteFile(src, []byte(code), 0o600))
	// A file named on the command line builds in the module of the working
	// directory (this one), with its go.mod and the module cache; no
	// network.
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "embedding"), src)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "README.md's snippet does not build:\n%s", out)

	vet := exec.Command("go", "vet", src)
	vet.Env = cmd.Env
	out, err = vet.CombinedOutput()
	require.NoError(t, err, "go vet of README.md's snippet:\n%s", out)
}

func TestEmbeddingSnippetExtraction(t *testing.T) {
	readme := "# x\n\n## Embedding\n\ntext\n\n```go\npackage main\n\nfunc main() {}\n```\n\n```go\nnot this\n```\n\n## Next\n\n```go\nnor this\n```\n"
	require.Equal(t, "package main\n\nfunc main() {}\n", embeddingSnippet(t, readme))
}
