package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// nonroot is the user the image runs as, numeric so that runAsNonRoot can
// check it: distroless's nonroot, as in the Dockerfile.
const nonroot = 65532

// epoch stamps every file and the image itself, so that the same binaries
// make the same image, digest for digest.
var epoch = time.Unix(0, 0).UTC()

// file is one file the image holds.
type file struct {
	path string // absolute, in the image
	data []byte
	mode int64
}

// skeleton is what a static binary of ours needs around it on a scratch
// base: the names of root and nonroot, and a writable /tmp (the
// Deployments mount an emptyDir there; a plain docker run uses this one).
func skeleton() []file {
	return []file{
		{path: "/etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf(
			"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot))},
		{path: "/etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonroot))},
	}
}

// build makes the image: one layer with the skeleton and the binaries,
// the broker its entrypoint, run as nonroot.
func build(binaries []file, arch string) (v1.Image, error) {
	files := append(skeleton(), binaries...)
	layerTar, err := tarOf(files, []string{"/etc", "/home", "/home/nonroot", "/tmp"})
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("making the layer: %w", err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{CreatedBy: "test/image: the broker and the example handler", Created: v1.Time{Time: epoch}},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = "linux", arch, v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{"/broker"}
	cfg.Config.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/"}
	// gRPC (TLS), admission webhooks (HTTPS), metrics and health (HTTP).
	cfg.Config.ExposedPorts = map[string]struct{}{"7443/tcp": {}, "8443/tcp": {}, "9090/tcp": {}}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":  "tether",
		"org.opencontainers.image.source": "https://github.com/tether-dev/tether",
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the image configuration: %w", err)
	}
	return img, nil
}

// tarOf is a tar stream of dirs (mode 0755, /tmp 1777) and files, owned by
// root, stamped with epoch.
func tarOf(files []file, dirs []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range dirs {
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX}
		if d == "/home/nonroot" {
			hdr.Uid, hdr.Gid = nonroot, nonroot
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if !path.IsAbs(f.path) {
			return nil, fmt.Errorf("%q: the image's paths are absolute", f.path)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.path[1:], Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
