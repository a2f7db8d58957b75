package ociimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Binaries builds each main package (a path relative to the repository root
// repo, as "./cmd/broker") as a static linux binary for arch, and returns
// them as files at the image's root named after their folders.
func Binaries(ctx context.Context, repo, arch string, pkgs ...string) ([]File, error) {
	work, err := os.MkdirTemp("", "tether-image-")
	if err != nil {
		return nil, fmt.Errorf("making a folder for the image's binaries: %w", err)
	}
	defer os.RemoveAll(work)
	ldflags := "-s -w"
	if v := Describe(ctx, repo); v != "" {
		ldflags += " -X " + buildinfoVersion + "=" + v
	}
	files := make([]File, 0, len(pkgs))
	for _, pkg := range pkgs {
		bin := filepath.Join(work, path.Base(pkg))
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags="+ldflags, "-o", bin, pkg)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s for linux/%s: %w\n%s", pkg, arch, err, msg)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("reading the built %s: %w", pkg, err)
		}
		files = append(files, File{Path: "/" + path.Base(pkg), Data: data, Mode: 0o755})
	}
	return files, nil
}

// buildinfoVersion is the variable the binaries report as their version.
const buildinfoVersion = "github.com/tether-dev/tether/broker/buildinfo.stamped"

// Describe is git's name for the checkout at repo ("v0.3.0-4-gabcdef0",
// "abcdef0-dirty"), or "" where there is no git checkout: the binaries then
// say "dev".
func Describe(ctx context.Context, repo string) string {
	cmd := exec.CommandContext(ctx, "git", "describe", "--tags", "--always", "--dirty")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Tether builds cmd/broker and cmd/example-handler in repo and makes the
// Tether image of them; it returns the binaries too, for the SBOM.
func Tether(ctx context.Context, repo, arch string) (v1.Image, []File, error) {
	bins, err := Binaries(ctx, repo, arch, "./cmd/broker", "./cmd/example-handler")
	if err != nil {
		return nil, nil, err
	}
	img, err := tether(bins, arch)
	return img, bins, err
}

// WriteTarball writes img as a tarball named tag (as "tether:dev") to file,
// making its folder if needed.
func WriteTarball(file, tag string, img v1.Image) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("the image's tag %q: %w", tag, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("making the folder of %s: %w", file, err)
	}
	if err := tarball.WriteToFile(file, ref, img); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return nil
}
