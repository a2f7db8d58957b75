package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/tether-dev/tether/test/gobin"
)

var fakeBinaries = []File{
	{Path: "/broker", Data: []byte("#!broker"), Mode: 0o755},
	{Path: "/example-handler", Data: []byte("#!example-handler"), Mode: 0o755},
}

// TestImageIsTheDockerfiles: what the tarball holds, read back as a
// runtime would: the broker as entrypoint, run as 65532:65532, the ports,
// and the two binaries, executable and owned by root, beside passwd, group
// and a /tmp anyone may write.
func TestImageIsTheDockerfiles(t *testing.T) {
	img, err := tether(fakeBinaries, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	tag, err := name.NewTag("tether:dev")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("reading the tarball back as tether:dev: %v", err)
	}
	cfg, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || !slices.Equal(c.Entrypoint, []string{"/broker"}) || c.User != "65532:65532" {
		t.Errorf("os %s arch %s entrypoint %q user %q, want linux amd64 [/broker] 65532:65532", cfg.OS, cfg.Architecture, c.Entrypoint, c.User)
	}
	for _, p := range []string{"7443/tcp", "8443/tcp", "9090/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, c.ExposedPorts)
		}
	}
	layers, err := back.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[hdr.Name] = hdr
	}
	for name, mode := range map[string]int64{"broker": 0o755, "example-handler": 0o755, "etc/passwd": 0o644, "etc/group": 0o644, "tmp/": 0o1777} {
		hdr := got[name]
		if hdr == nil {
			t.Errorf("%s is missing from the layer (it has %v)", name, slices.Sorted(maps.Keys(got)))
			continue
		}
		if hdr.Mode != mode || hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("%s: mode %o owner %d:%d, want %o root", name, hdr.Mode, hdr.Uid, hdr.Gid, mode)
		}
	}
}

// TestSameBinariesMakeTheSameImage: the image is reproducible, so a
// rebuild of unchanged sources imports as the same image.
func TestSameBinariesMakeTheSameImage(t *testing.T) {
	digest := func(bins []File) string {
		img, err := tether(bins, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	if a, b := digest(fakeBinaries), digest(fakeBinaries); a != b {
		t.Errorf("two builds of the same binaries: %s and %s", a, b)
	}
	changed := slices.Clone(fakeBinaries)
	changed[0] = File{Path: "/broker", Data: []byte("#!broker v2"), Mode: 0o755}
	if digest(fakeBinaries) == digest(changed) {
		t.Error("a changed binary made the same image")
	}
}

// TestTheSBOMNamesWhatTheBinariesWereBuiltWith: the SBOM of an image of a
// real binary (test/image, which links go-containerregistry; a test
// binary records no modules) names it, the Go standard library of its
// toolchain and its modules, each with the package URL scanners match on,
// and is the same for the same binaries.
func TestTheSBOMNamesWhatTheBinariesWereBuiltWith(t *testing.T) {
	bin, err := os.ReadFile(gobin.Build(t, "github.com/tether-dev/tether/test/image"))
	if err != nil {
		t.Fatal(err)
	}
	files := append(skeleton(), File{Path: "/image", Data: bin, Mode: 0o755})
	sbom, err := SBOM("tether:dev", "sha256:0123", "v0.1.0", files)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDoc
	if err := json.Unmarshal(sbom, &doc); err != nil {
		t.Fatalf("the SBOM is not JSON: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.Name != "tether:dev" || !strings.HasSuffix(doc.DocumentNamespace, "sha256:0123") {
		t.Errorf("document %q %q %q", doc.SPDXVersion, doc.Name, doc.DocumentNamespace)
	}
	purls := map[string]bool{}
	binaries := 0
	for _, p := range doc.Packages {
		if p.PrimaryPurpose == "APPLICATION" {
			binaries++
		}
		for _, r := range p.ExternalRefs {
			purls[r.Locator] = true
		}
	}
	stdlib := "pkg:golang/stdlib@" + strings.TrimPrefix(runtime.Version(), "go")
	registry := ""
	for purl := range purls {
		if strings.HasPrefix(purl, "pkg:golang/github.com/google/go-containerregistry@") {
			registry = purl
		}
	}
	if binaries != 1 || !purls[stdlib] || registry == "" {
		t.Errorf("%d binaries (want 1, passwd and group are none), %s listed: %v, go-containerregistry: %q", binaries, stdlib, purls[stdlib], registry)
	}
	again, err := SBOM("tether:dev", "sha256:0123", "v0.1.0", files)
	if err != nil || !bytes.Equal(again, sbom) {
		t.Errorf("the same binaries made another SBOM (%v)", err)
	}
	if _, err := SBOM("tether:dev", "sha256:0123", "v0.1.0", skeleton()); err == nil {
		t.Error("an image without a Go binary: no error")
	}
}
