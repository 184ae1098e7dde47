package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// OCI media types the image uses.
const (
	ociIndex    = "application/vnd.oci.image.index.v1+json"
	ociManifest = "application/vnd.oci.image.manifest.v1+json"
	ociConfig   = "application/vnd.oci.image.config.v1+json"
	ociLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type ociIndexDoc struct {
	MediaType string          `json:"mediaType"`
	Manifests []ociDescriptor `json:"manifests"`
}

type ociManifestDoc struct {
	MediaType string          `json:"mediaType"`
	Config    ociDescriptor   `json:"config"`
	Layers    []ociDescriptor `json:"layers"`
}

type ociConfigDoc struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// layoutArchive is an OCI image layout read from its tar archive.
type layoutArchive map[string][]byte

func readLayoutArchive(t *testing.T, path string) layoutArchive {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := layoutArchive{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			out[h.Name] = b
		}
	}
}

// blob is the content of d, checked against its digest and size.
func (l layoutArchive) blob(t *testing.T, d ociDescriptor) []byte {
	t.Helper()
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	require.True(t, ok, "digest %s", d.Digest)
	b, ok := l["blobs/sha256/"+hexDigest]
	require.True(t, ok, "blob %s is missing", d.Digest)
	require.Equal(t, "sha256:"+sha256hex(b), d.Digest)
	require.EqualValues(t, len(b), d.Size, "size of %s", d.Digest)
	return b
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// layerFile is one entry of a layer.
type layerFile struct {
	hdr  *tar.Header
	data []byte
}

// layerFiles reads a gzip layer, returning its entries by path and the
// digest of its uncompressed tar (the config's diff_id).
func layerFiles(t *testing.T, gz []byte) (map[string]layerFile, string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	files := map[string]layerFile{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, "sha256:" + sha256hex(raw)
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[strings.TrimSuffix(h.Name, "/")] = layerFile{h, b}
	}
}

// TestContainerImage builds the image with the imagebuild tool (no
// container engine: go-containerregistry, FROM SCRATCH) and checks the
// OCI layout it writes: an index for the platforms built, each
// image a base layer (passwd naming the non-root user, CA certificates)
// and a binary layer (a static /pollworker of the right architecture),
// run as 65532:65532 with entrypoint /pollworker run; every blob matches
// its digest; and the amd64 binary taken out of the image prints the
// version stamped with -ldflags.
func TestContainerImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary for the image")
	}
	// linux/amd64 only by default: a cold build of the binary for arm64
	// costs ~165 s of CPU, which the suite's 10 minutes on 2 cores cannot
	// spare. make image builds both; POLLWORKER_IMAGE_PLATFORMS=
	// linux/amd64,linux/arm64 makes this test build and check both.
	platforms := os.Getenv("POLLWORKER_IMAGE_PLATFORMS")
	if platforms == "" {
		platforms = "linux/amd64"
	}
	var wantArchs []string
	for _, p := range strings.Split(platforms, ",") {
		wantArchs = append(wantArchs, strings.TrimPrefix(p, "linux/"))
	}
	tool := buildTool(t, "imagebuild")
	const version = "v9.8.7-imagetest"
	out := filepath.Join(t.TempDir(), "pollworker-image.tar")
	build := exec.Command(tool, "-C", "..", "-o", out, "-platforms", platforms,
		"-ldflags", "-X main.version="+version+" -X main.commit=0123456789abcdef0123456789abcdef01234567 -X main.date=2026-01-02T03:04:05Z")
	msg, err := build.CombinedOutput()
	require.NoError(t, err, "%s", msg)

	l := readLayoutArchive(t, out)
	require.JSONEq(t, `{"imageLayoutVersion": "1.0.0"}`, string(l["oci-layout"]))
	var top ociIndexDoc
	require.NoError(t, json.Unmarshal(l["index.json"], &top))
	require.Len(t, top.Manifests, 1)
	require.Equal(t, ociIndex, top.Manifests[0].MediaType, "the layout names one multi-platform index")
	require.Equal(t, "ghcr.io/pollworker/pollworker:latest", top.Manifests[0].Annotations["org.opencontainers.image.ref.name"])

	var idx ociIndexDoc
	require.NoError(t, json.Unmarshal(l.blob(t, top.Manifests[0]), &idx))
	require.Equal(t, ociIndex, idx.MediaType)
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	var archs []string
	for _, d := range idx.Manifests {
		require.NotNil(t, d.Platform)
		require.Equal(t, "linux", d.Platform.OS)
		arch := d.Platform.Architecture
		archs = append(archs, arch)
		t.Run(arch, func(t *testing.T) {
			require.Equal(t, ociManifest, d.MediaType)
			var m ociManifestDoc
			require.NoError(t, json.Unmarshal(l.blob(t, d), &m))
			require.Equal(t, ociConfig, m.Config.MediaType)
			var cfg ociConfigDoc
			require.NoError(t, json.Unmarshal(l.blob(t, m.Config), &cfg))
			require.Equal(t, "linux", cfg.OS)
			require.Equal(t, arch, cfg.Architecture)
			require.Equal(t, "65532:65532", cfg.Config.User, "not root")
			require.Equal(t, []string{"/pollworker"}, cfg.Config.Entrypoint)
			require.Equal(t, []string{"run"}, cfg.Config.Cmd)
			require.Contains(t, cfg.Config.ExposedPorts, "9090/tcp")
			require.Equal(t, version, cfg.Config.Labels["org.opencontainers.image.version"])

			require.Len(t, m.Layers, 2, "base, binary")
			require.Len(t, cfg.RootFS.DiffIDs, 2)
			var layers []map[string]layerFile
			for i, ld := range m.Layers {
				require.Equal(t, ociLayer, ld.MediaType)
				files, diffID := layerFiles(t, l.blob(t, ld))
				require.Equal(t, cfg.RootFS.DiffIDs[i], diffID, "layer %d", i)
				for name, f := range files {
					require.Zero(t, f.hdr.Uid, "%s owned by root (not writable by the user)", name)
				}
				layers = append(layers, files)
			}

			base := layers[0]
			require.Contains(t, string(base["etc/passwd"].data), "nonroot:x:65532:65532:", "the user has a name")
			require.Contains(t, string(base["etc/group"].data), "nonroot:x:65532:")
			if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
				require.Equal(t, ca, base["etc/ssl/certs/ca-certificates.crt"].data, "the build machine's CA certificates")
			}

			require.Len(t, layers[1], 1, "the binary alone")
			bin := layers[1]["pollworker"]
			require.EqualValues(t, 0o755, bin.hdr.Mode&0o7777)
			ef, err := elf.NewFile(bytes.NewReader(bin.data))
			require.NoError(t, err)
			require.Equal(t, machines[arch], ef.Machine)
			for _, p := range ef.Progs {
				require.NotEqual(t, elf.PT_INTERP, p.Type, "static: no dynamic loader in a scratch image")
			}

			if runtime.GOOS != "linux" || runtime.GOARCH != arch {
				return
			}
			path := filepath.Join(t.TempDir(), "pollworker")
			require.NoError(t, os.WriteFile(path, bin.data, 0o755))
			got, err := exec.Command(path, "version").CombinedOutput()
			require.NoError(t, err, "%s", got)
			require.Contains(t, string(got), "version: "+version+"\n")
			require.Contains(t, string(got), "commit:  0123456789abcdef0123456789abcdef01234567\n")
		})
	}
	require.ElementsMatch(t, wantArchs, archs)
}
