// Command imagebuild builds the pollworker container image without a
// container engine: a multi-platform OCI image index (linux/amd64 and
// linux/arm64 by default) assembled FROM SCRATCH with
// go-containerregistry, written as an OCI image layout archive (a tar of
// the layout, as `podman load`, `skopeo copy oci-archive:` and
// `crane push` read it).
//
//	imagebuild -o pollworker-image.tar [-C REPO] [-ldflags FLAGS] [-platforms linux/amd64,linux/arm64] [-tag NAME]
//
// Each platform's image has two layers: a base (/etc/passwd and /etc/group
// naming the non-root user nonroot, uid and gid 65532, the build machine's
// CA certificates when it has them, an empty /tmp) and the binary,
// /pollworker, a static CGO_ENABLED=0 build of ./cmd/pollworker with
// -trimpath and -ldflags (pass the Makefile's LDFLAGS so that
// `pollworker version` says what `make build` would). The image runs as
// 65532:65532 with entrypoint /pollworker and command run. File times are
// SOURCE_DATE_EPOCH (or 0), so the same sources and flags give the same
// digests. Bad usage exits 2; a failed build exits 1.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: not root, the uid distroless calls nonroot.
const (
	userName = "nonroot"
	userID   = 65532
	// caFile is where Go's crypto/x509 looks first on Linux.
	caFile  = "/etc/ssl/certs/ca-certificates.crt"
	binPath = "/pollworker"
	// httpPort is the worker's --http-addr default.
	httpPort = "9090/tcp"
)

// errUsage marks a usage error (exit 2).
var errUsage = errors.New("imagebuild: usage")

type options struct {
	out       string
	repo      string
	ldflags   string
	platforms []v1.Platform
	tag       string
	version   string
	epoch     time.Time
}

func main() {
	err := run(os.Args[1:], os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{}
	fs.StringVar(&o.out, "o", "", "the OCI layout archive to write (.tar)")
	fs.StringVar(&o.repo, "C", ".", "the repository root (holds ./cmd/pollworker)")
	fs.StringVar(&o.ldflags, "ldflags", "", "go build -ldflags (the Makefile's LDFLAGS), -s -w added")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	fs.StringVar(&o.tag, "tag", "ghcr.io/pollworker/pollworker:latest", "the reference name recorded in the layout")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if o.out == "" {
		return o, fmt.Errorf("%w: -o FILE.tar is required", errUsage)
	}
	for _, p := range strings.Split(*platforms, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || osName != "linux" || arch == "" {
			return o, fmt.Errorf("%w: platform %q: want linux/ARCH", errUsage, p)
		}
		o.platforms = append(o.platforms, v1.Platform{OS: osName, Architecture: arch})
	}
	o.epoch = time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return o, fmt.Errorf("%w: SOURCE_DATE_EPOCH %q: %v", errUsage, s, err)
		}
		o.epoch = time.Unix(sec, 0).UTC()
	}
	o.version = stampedVersion(o.ldflags)
	return o, nil
}

// stampedVersion is the value of -X main.version=… in ldflags, or "dev".
func stampedVersion(ldflags string) string {
	for _, f := range strings.Fields(ldflags) {
		if v, ok := strings.CutPrefix(f, "main.version="); ok {
			return v
		}
	}
	return "dev"
}

func run(args []string, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	defer os.RemoveAll(tmp)

	base, err := baseLayer(o.epoch)
	if err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.platforms {
		bin := filepath.Join(tmp, "pollworker-"+p.Architecture)
		if err := buildBinary(o, p, bin); err != nil {
			return err
		}
		img, err := platformImage(o, p, base, bin)
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture}},
		})
	}
	dir := filepath.Join(tmp, "layout")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("imagebuild: layout: %w", err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.tag,
	})); err != nil {
		return fmt.Errorf("imagebuild: layout: %w", err)
	}
	if err := tarDir(dir, o.out, o.epoch); err != nil {
		return err
	}
	d, _ := idx.Digest()
	fmt.Fprintf(stderr, "imagebuild: wrote %s (%s, index %s, version %s)\n", o.out, platformList(o.platforms), d, o.version)
	return nil
}

func platformList(ps []v1.Platform) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.OS+"/"+p.Architecture)
	}
	return strings.Join(s, ",")
}

// buildBinary builds a static pollworker for p.
func buildBinary(o options, p v1.Platform, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w "+o.ldflags), "-o", out, "./cmd/pollworker")
	cmd.Dir = o.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("imagebuild: go build for %s/%s: %w\n%s", p.OS, p.Architecture, err, b)
	}
	return nil
}

// platformImage is one platform's image: base, then the binary.
func platformImage(o options, p v1.Platform, base v1.Layer, bin string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	binLayer, err := layerOf(o.epoch, []entry{{name: binPath, mode: 0o755, data: data}})
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, base, binLayer)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = p.OS, p.Architecture
	cf.Created = v1.Time{Time: o.epoch}
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", userID, userID),
		Entrypoint:   []string{binPath},
		Cmd:          []string{"run"},
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{httpPort: {}},
		Env:          []string{"PATH=/", "SSL_CERT_FILE=" + caFile},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "pollworker",
			"org.opencontainers.image.version": o.version,
			"org.opencontainers.image.source":  "https://github.com/pollworker/pollworker",
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	return img, nil
}

// entry is one file or directory of a layer (a directory when data is nil
// and mode has fs.ModeDir).
type entry struct {
	name string
	mode fs.FileMode
	data []byte
}

// baseLayer holds what a scratch image needs for a non-root Go binary.
func baseLayer(epoch time.Time) (v1.Layer, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", userName, userID, userID, userName, userName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, userID)
	es := []entry{
		{name: "/etc", mode: fs.ModeDir | 0o755},
		{name: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "/etc/group", mode: 0o644, data: []byte(group)},
		{name: "/tmp", mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}
	// CA certificates for rediss:// and https:// targets, when the build
	// machine has them (a scratch image has none of its own).
	if ca, err := os.ReadFile(caFile); err == nil {
		es = append(es,
			entry{name: "/etc/ssl", mode: fs.ModeDir | 0o755},
			entry{name: "/etc/ssl/certs", mode: fs.ModeDir | 0o755},
			entry{name: caFile, mode: 0o644, data: ca})
	}
	return layerOf(epoch, es)
}

// layerOf makes an OCI layer (gzip tar) of es, owned by root, at epoch.
func layerOf(epoch time.Time, es []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: strings.TrimPrefix(e.name, "/"), ModTime: epoch, Format: tar.FormatPAX}
		if e.mode.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			h.Mode = int64(e.mode.Perm())
			if e.mode&fs.ModeSticky != 0 {
				h.Mode |= 0o1000
			}
		} else {
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, int64(e.mode.Perm()), int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("imagebuild: layer: %w", err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("imagebuild: layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("imagebuild: layer: %w", err)
	}
	raw := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("imagebuild: layer: %w", err)
	}
	return l, nil
}

// tarDir writes the layout directory dir as the tar archive out, entries
// sorted and timed at epoch so that the archive is reproducible.
func tarDir(dir, out string, epoch time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	tw := tar.NewWriter(f)
	werr := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Mode: 0o644, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Name, h.Mode, h.Typeflag = h.Name+"/", 0o755, tar.TypeDir
			return tw.WriteHeader(h)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err := errors.Join(werr, tw.Close(), f.Close()); err != nil {
		os.Remove(out)
		return fmt.Errorf("imagebuild: writing %s: %w", out, err)
	}
	return nil
}
