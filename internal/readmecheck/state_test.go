package readmecheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStateSnippetBuilds builds the program of the README's "Per-session
// state" section (its second ```go block; the first lists the API) as
// TestEmbeddingSnippetBuilds builds the embedding example.
func TestStateSnippetBuilds(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "\n## Per-session state\n")
	require.True(t, ok, `README.md has no "## Per-session state" section`)
	if next := strings.Index(section, "\n## "); next >= 0 {
		section = section[:next]
	}
	// Past the first block, the rest reads as an "## Embedding" section
	// whose first block is the program.
	_, rest, ok := strings.Cut(section, "\n```go\n")
	require.True(t, ok, "the section has no ```go block")
	_, rest, ok = strings.Cut(rest, "\n```\n")
	require.True(t, ok, "the section's first ```go block is not closed")
	buildSnippet(t, embeddingSnippet(t, "\n## Embedding\n"+rest))
}
