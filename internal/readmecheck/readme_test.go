// Package readmecheck holds a test that builds the README's embedding
// example, so that the snippet users copy compiles against this module.
package readmecheck

import (
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	buildSnippet(t, embeddingSnippet(t, string(readme)))
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
