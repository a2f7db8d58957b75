// Command image builds the Tether image without Docker and without a
// registry: cmd/broker and cmd/example-handler as static binaries, in one
// layer on an empty base with the names of root and nonroot, the broker
// the entrypoint, run as 65532:65532 (the Dockerfile's image, with
// go-containerregistry). It writes the image as a tarball that `ctr images
// import`, `kind load image-archive` and `docker load` take, and beside it
// its SBOM (SPDX 2.3 JSON: the binaries, the Go toolchain and every module
// linked in, with package URLs scanners match on). The same sources make
// the same image, digest for digest, and the same SBOM.
//
//	go run ./test/image -o .dev/tether-image.tar -tag tether:dev
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "image:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", ".dev/tether-image.tar", "the image tarball to write")
	tag := fs.String("tag", "tether:dev", "the image's name in the tarball, as the manifests in deploy/ use it")
	arch := fs.String("arch", runtime.GOARCH, "the architecture to build for (GOARCH)")
	sbomOut := fs.String("sbom", "", "the SBOM to write, SPDX 2.3 JSON: each binary and the Go modules and toolchain it was built with (default: -o with .spdx.json for .tar)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *sbomOut == "" {
		*sbomOut = strings.TrimSuffix(*out, ".tar") + ".spdx.json"
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	repo, err := controlplane.FindRepoRoot(wd)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "image: building ./cmd/broker and ./cmd/example-handler for linux/%s\n", *arch)
	img, bins, err := ociimage.Tether(ctx, repo, *arch)
	if err != nil {
		return err
	}
	if err := ociimage.WriteTarball(*out, ref.String(), img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	sbom, err := ociimage.SBOM(ref.String(), digest.String(), ociimage.Describe(ctx, repo), bins)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*sbomOut, sbom, 0o644); err != nil {
		return fmt.Errorf("writing the SBOM: %w", err)
	}
	size, err := img.Size()
	if err != nil {
		return err
	}
	fi, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "image: %s %s (%.1f MB) written to %s (manifest of %d bytes), its SBOM to %s\n", ref, digest, float64(fi.Size())/1e6, *out, size, *sbomOut)
	return nil
}
