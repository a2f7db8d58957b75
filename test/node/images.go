package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/ociimage"
)

// TetherImage is the Tether image every node imports, by the name the
// manifests in deploy/ use.
const TetherImage = "tether:dev"

// buildImages writes into dir the tarballs of the Tether image, built from
// this checkout's sources, and of the pause image, and returns their paths.
func buildImages(ctx context.Context, dir string, progress io.Writer) ([]string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	repo, err := controlplane.FindRepoRoot(wd)
	if err != nil {
		return nil, fmt.Errorf("finding the sources of the images: %w", err)
	}
	begin := time.Now()
	fmt.Fprintf(progress, "node: building the images %s and %s\n", TetherImage, PauseImage)
	tether, _, err := ociimage.Tether(ctx, repo, runtime.GOARCH)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", TetherImage, err)
	}
	pauseBin, err := ociimage.Binaries(ctx, repo, runtime.GOARCH, "./test/node/pause")
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", PauseImage, err)
	}
	pause, err := ociimage.Build(ociimage.Image{
		Files:      pauseBin,
		Entrypoint: []string{"/pause"},
		Title:      "pause",
		CreatedBy:  "test/node: the Pods' sandbox",
		Arch:       runtime.GOARCH,
	})
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", PauseImage, err)
	}
	var paths []string
	for _, out := range []struct {
		file, tag string
		img       v1.Image
	}{{"tether.tar", TetherImage, tether}, {"pause.tar", PauseImage, pause}} {
		path := filepath.Join(dir, out.file)
		if err := ociimage.WriteTarball(path, out.tag, out.img); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	fmt.Fprintf(progress, "node: images built in %s\n", time.Since(begin).Round(time.Second))
	return paths, nil
}
