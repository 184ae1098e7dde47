package deploy

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// goreleaserConfig is the part of .goreleaser.yaml this repository uses.
// Decoding rejects any other key, so that a misspelt key (which GoReleaser
// would also reject) fails here first.
type goreleaserConfig struct {
	Version     int    `yaml:"version"`
	ProjectName string `yaml:"project_name"`
	Before      struct {
		Hooks []string `yaml:"hooks"`
	} `yaml:"before"`
	Builds []struct {
		ID           string   `yaml:"id"`
		Main         string   `yaml:"main"`
		Binary       string   `yaml:"binary"`
		Env          []string `yaml:"env"`
		Goos         []string `yaml:"goos"`
		Goarch       []string `yaml:"goarch"`
		Flags        []string `yaml:"flags"`
		Ldflags      []string `yaml:"ldflags"`
		ModTimestamp string   `yaml:"mod_timestamp"`
	} `yaml:"builds"`
	Archives []struct {
		ID           string   `yaml:"id"`
		Formats      []string `yaml:"formats"`
		NameTemplate string   `yaml:"name_template"`
		Files        []string `yaml:"files"`
	} `yaml:"archives"`
	Checksum struct {
		NameTemplate string `yaml:"name_template"`
		Algorithm    string `yaml:"algorithm"`
	} `yaml:"checksum"`
	Snapshot struct {
		VersionTemplate string `yaml:"version_template"`
	} `yaml:"snapshot"`
	Changelog struct {
		Sort string `yaml:"sort"`
	} `yaml:"changelog"`
}

func loadGoreleaser(t *testing.T) goreleaserConfig {
	t.Helper()
	raw, err := os.ReadFile("../.goreleaser.yaml")
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var c goreleaserConfig
	require.NoError(t, dec.Decode(&c))
	return c
}

// stampRe finds the -X flags of a linker command line: -X pkg.name=value.
var stampRe = regexp.MustCompile(`-X[ =]([\w./-]+)\.(\w+)=(\S*)`)

// stamps returns name -> value of every -X flag in s, requiring package
// main (the binary's own package).
func stamps(t *testing.T, what, s string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range stampRe.FindAllStringSubmatch(s, -1) {
		require.Equal(t, "main", m[1], "%s: -X %s.%s: the variables live in package main", what, m[1], m[2])
		out[m[2]] = m[3]
	}
	require.NotEmpty(t, out, "%s stamps nothing", what)
	return out
}

// mainStringVars are the package-level variables of cmd/pollworker that -X
// can set: string variables, without a type or of type string, initialised
// with at most a string literal.
func mainStringVars(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("../cmd/pollworker/*.go")
	require.NoError(t, err)
	vars := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		require.Equal(t, "main", file.Name.Name, f)
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.VAR {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				isString := vs.Type == nil // then the value must be a string literal
				if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "string" {
					isString = true
				}
				for i, name := range vs.Names {
					ok := isString
					switch {
					case i < len(vs.Values):
						bl, lit := vs.Values[i].(*ast.BasicLit)
						ok = ok && lit && bl.Kind == token.STRING
					case vs.Type == nil:
						ok = false
					}
					if ok {
						vars[name.Name] = true
					}
				}
			}
		}
	}
	return vars
}

// TestGoreleaserConfig checks .goreleaser.yaml offline: schema version 2,
// the pollworker binary for linux and darwin on amd64 and arm64, archives
// and checksums, and -X flags that name existing string variables of
// cmd/pollworker, the same ones `make build` and deploy/Dockerfile stamp.
func TestGoreleaserConfig(t *testing.T) {
	c := loadGoreleaser(t)
	require.Equal(t, 2, c.Version, "configuration schema version")
	require.Len(t, c.Builds, 1)
	b := c.Builds[0]
	require.Equal(t, "./cmd/pollworker", b.Main)
	require.Equal(t, "pollworker", b.Binary)
	require.Contains(t, b.Env, "CGO_ENABLED=0", "static binaries, as the Dockerfile builds")
	require.ElementsMatch(t, []string{"linux", "darwin"}, b.Goos)
	require.ElementsMatch(t, []string{"amd64", "arm64"}, b.Goarch)
	require.NotEmpty(t, c.Archives)
	require.Contains(t, c.Archives[0].Formats, "tar.gz")
	for _, pattern := range c.Archives[0].Files {
		m, err := filepath.Glob(filepath.Join("..", pattern))
		require.NoError(t, err)
		require.NotEmpty(t, m, "archive file %s matches nothing", pattern)
	}
	require.NotEmpty(t, c.Checksum.NameTemplate)
	require.Equal(t, "sha256", c.Checksum.Algorithm)

	release := stamps(t, ".goreleaser.yaml", strings.Join(b.Ldflags, " "))
	vars := mainStringVars(t)
	for name := range release {
		require.True(t, vars[name], "-X main.%s: cmd/pollworker has no package-level string variable %s", name, name)
	}

	makefile, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	ldflags := regexp.MustCompile(`(?m)^LDFLAGS\s*:?=(.*)$`).FindSubmatch(makefile)
	require.NotNil(t, ldflags, "Makefile: no LDFLAGS line")
	dockerfile, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	for what, src := range map[string]string{"Makefile": string(ldflags[1]), "deploy/Dockerfile": string(dockerfile)} {
		got := stamps(t, what, src)
		require.ElementsMatch(t, slices.Collect(maps.Keys(release)), slices.Collect(maps.Keys(got)),
			"%s and .goreleaser.yaml stamp different variables", what)
	}
}

// TestGoreleaserLdflagsStampTheBinary renders the ldflags templates with
// sample values, builds cmd/pollworker with them as GoReleaser would, and
// reads the values back from `pollworker version`.
func TestGoreleaserLdflagsStampTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	c := loadGoreleaser(t)
	require.Len(t, c.Builds, 1)
	b := c.Builds[0]
	vals := map[string]any{ // GoReleaser's template fields used in ldflags
		"Version":    "1.2.3",
		"FullCommit": "0123456789abcdef0123456789abcdef01234567",
		"Date":       "2026-01-02T03:04:05Z",
	}
	var rendered []string
	for _, f := range b.Ldflags {
		tmpl, err := template.New("ldflags").Option("missingkey=error").Parse(f)
		require.NoError(t, err, f)
		var out strings.Builder
		require.NoError(t, tmpl.Execute(&out, vals), "ldflags %q uses a field this test does not know; add it to vals", f)
		rendered = append(rendered, out.String())
	}
	bin := filepath.Join(t.TempDir(), "pollworker")
	args := append([]string{"build"}, b.Flags...)
	args = append(args, "-ldflags", strings.Join(rendered, " "), "-o", bin, "."+strings.TrimPrefix(b.Main, "."))
	build := exec.Command("go", args...)
	build.Dir = ".."
	build.Env = append(os.Environ(), b.Env...)
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go %s\n%s", strings.Join(args, " "), out)

	out, err = exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := string(out)
	require.Contains(t, got, "version: v1.2.3\n", "the same form as make build: v + tag")
	require.Contains(t, got, "commit:  0123456789abcdef0123456789abcdef01234567\n")
	require.Contains(t, got, "built:   2026-01-02T03:04:05Z\n")
}
