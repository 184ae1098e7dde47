package readmecheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository root, seen from this package's directory.
var root = filepath.Join("..", "..")

// page is one markdown file the checks read: README.md or docs/*.md.
type page struct {
	path string // relative to the repository root, slash-separated
	text string
}

// block is one fenced code block of a page.
type block struct {
	lang string // the word after the opening fence, "" if none
	code string
	line int // of the opening fence, 1-based
}

// pages reads README.md and every page under docs/.
func pages(t *testing.T) []page {
	t.Helper()
	paths := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, d := range docs {
		paths = append(paths, "docs/"+filepath.Base(d))
	}
	var out []page
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		require.NoError(t, err)
		out = append(out, page{path: p, text: string(b)})
	}
	return out
}

// blocks returns the fenced code blocks of text, in order.
func blocks(text string) []block {
	var out []block
	var cur *block
	for i, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "```") {
			if cur != nil {
				cur.code += line + "\n"
			}
			continue
		}
		if cur == nil {
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), line: i + 1}
			continue
		}
		out = append(out, *cur)
		cur = nil
	}
	return out
}

// prose is text without its fenced code blocks (each line of a block
// blanked, so that line numbers stay).
func prose(text string) string {
	lines := strings.Split(text, "\n")
	in := false
	for i, line := range lines {
		if strings.HasPrefix(line, "```") {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// links returns the link targets of the page's prose.
func links(text string) []string {
	var out []string
	for _, m := range linkRE.FindAllStringSubmatch(prose(text), -1) {
		out = append(out, m[1])
	}
	return out
}

// anchors returns the GitHub anchors of the headings of a markdown text.
func anchors(text string) []string {
	var out []string
	for _, line := range strings.Split(prose(text), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestEveryDocsPageIsLinkedFromTheReadme: the README is the way in, so a
// page under docs/ that it does not link is a page nobody finds.
func TestEveryDocsPageIsLinkedFromTheReadme(t *testing.T) {
	ps := pages(t)
	readmeLinks := links(ps[0].text)
	require.Greater(t, len(ps), 1, "docs/ has no pages")
	for _, p := range ps[1:] {
		linked := slices.ContainsFunc(readmeLinks, func(l string) bool {
			target, _, _ := strings.Cut(l, "#")
			return target == p.path
		})
		require.True(t, linked, "README.md does not link %s", p.path)
	}
}

// TestRelativeLinksResolve: every link of the README and the docs pages to
// a file of the repository names one that exists, and every #anchor a
// heading of its page.
func TestRelativeLinksResolve(t *testing.T) {
	for _, p := range pages(t) {
		for _, l := range links(p.text) {
			if strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(l, "#")
			path := p.path
			if target != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(p.path), target))
				_, err := os.Stat(filepath.Join(root, filepath.FromSlash(path)))
				require.NoError(t, err, "%s links %s: no such file", p.path, l)
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
			require.NoError(t, err)
			require.Contains(t, anchors(string(b)), anchor, "%s links %s: no such heading in %s", p.path, l, path)
		}
	}
}

func TestBlocksAndAnchors(t *testing.T) {
	text := "# A page\n\n## Load-aware balance and `--weight`\n\n```sh\nmake test\n```\n\n[x](docs/a.md#b)\n```go\npackage main\n```\n"
	require.Equal(t, []block{{lang: "sh", code: "make test\n", line: 5}, {lang: "go", code: "package main\n", line: 10}}, blocks(text))
	require.Equal(t, []string{"a-page", "load-aware-balance-and---weight"}, anchors(text))
	require.Equal(t, []string{"docs/a.md#b"}, links(text))
}
