package ociimage

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

// File is one file an image holds.
type File struct {
	Path string // absolute, in the image
	Data []byte
	Mode int64
}

// Image describes an image of static binaries on an empty base.
type Image struct {
	// Files are the binaries (and any other files) the image holds.
	Files []File
	// Entrypoint is the command the image runs.
	Entrypoint []string
	// Ports are the ports it exposes, as "7443/tcp".
	Ports []string
	// Title is its org.opencontainers.image.title label.
	Title string
	// CreatedBy is what its history says made its layer.
	CreatedBy string
	// Arch is the architecture of the binaries (GOARCH).
	Arch string
}

// skeleton is what a static binary of ours needs around it on a scratch
// base: the names of root and nonroot, and a writable /tmp (the
// Deployments mount an emptyDir there; a plain docker run uses this one).
func skeleton() []File {
	return []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(fmt.Sprintf(
			"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot))},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonroot))},
	}
}

// tether is the Tether image of the two binaries: the Dockerfile's, the
// broker its entrypoint.
func tether(binaries []File, arch string) (v1.Image, error) {
	return Build(Image{
		Files:      binaries,
		Entrypoint: []string{"/broker"},
		// gRPC (TLS), admission webhooks (HTTPS), metrics and health (HTTP).
		Ports:     []string{"7443/tcp", "8443/tcp", "9090/tcp"},
		Title:     "tether",
		CreatedBy: "test/image: the broker and the example handler",
		Arch:      arch,
	})
}

// Build makes the image: one layer with the skeleton and the files, run as
// nonroot.
func Build(spec Image) (v1.Image, error) {
	files := append(skeleton(), spec.Files...)
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
		History: v1.History{CreatedBy: spec.CreatedBy, Created: v1.Time{Time: epoch}},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = "linux", spec.Arch, v1.Time{Time: epoch}
	cfg.Config.Entrypoint = spec.Entrypoint
	cfg.Config.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/"}
	if len(spec.Ports) > 0 {
		cfg.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range spec.Ports {
			cfg.Config.ExposedPorts[p] = struct{}{}
		}
	}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":  spec.Title,
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
func tarOf(files []File, dirs []string) ([]byte, error) {
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
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("%q: the image's paths are absolute", f.Path)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.Path[1:], Mode: f.Mode, Size: int64(len(f.Data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
