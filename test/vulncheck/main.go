// Command vulncheck runs govulncheck over the main module and fails when
// the code calls a function with a known vulnerability, in a module it
// requires or in the Go standard library it is built with:
//
//	go run ./test/vulncheck            # the pinned database snapshot
//	go run ./test/vulncheck -db https://vuln.go.dev
//
// `make check` runs it. By default it reads the Go vulnerability database as
// of the golang.org/x/vulndb snapshot that test/tools/vuln/go.mod pins: the
// snapshot's OSV files, downloaded once from the Go module proxy, are
// indexed once into the cache folder (a few seconds), so that a run needs no
// other network access and gives the same answer on every machine until the
// pin is moved. Move it with
//
//	go -C test/tools/vuln get golang.org/x/vulndb@latest && go -C test/tools/vuln mod tidy
//
// govulncheck itself is the version test/tools/vuln/go.mod names, built by
// `go tool` (and cached by the go command) on first use.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/tether-dev/tether/test/controlplane"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("vulncheck", flag.ContinueOnError)
	db := fs.String("db", "", "the vulnerability database `URL` (https://vuln.go.dev, or file:///DIR); empty: the snapshot pinned in test/tools/vuln/go.mod, indexed once into the cache")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "vulncheck: %v\n", err)
		return 1
	}
	tools := filepath.Join(root, "test", "tools", "vuln")
	if *db == "" {
		dir, err := ensureDB(ctx, tools)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vulncheck: %v\n", err)
			return 1
		}
		*db = "file://" + dir
	}
	fmt.Fprintf(os.Stderr, "vulncheck: govulncheck over ./... with the database %s\n", *db)
	cmd := exec.CommandContext(ctx, "go", "-C", tools, "tool", "govulncheck", "-C", root, "-db", *db, "./...")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "vulncheck: running govulncheck: %v\n", err)
		return 1
	}
	return 0
}

// repoRoot is the repository the command runs in.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the working directory: %w", err)
	}
	root, err := controlplane.FindRepoRoot(wd)
	if err != nil {
		return "", fmt.Errorf("locating the repository (run from inside it): %w", err)
	}
	return root, nil
}

// ensureDB returns the folder of the pinned snapshot's database, indexing
// it into the cache folder first when it is not there.
func ensureDB(ctx context.Context, tools string) (string, error) {
	mod, err := vulndbModule(ctx, tools)
	if err != nil {
		return "", err
	}
	cache, err := controlplane.CacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the cache folder: %w", err)
	}
	dir := filepath.Join(cache, "vulndb-"+mod.Version)
	if _, err := os.Stat(filepath.Join(dir, "index", "db.json")); err == nil {
		return dir, nil
	}
	fmt.Fprintf(os.Stderr, "vulncheck: indexing the vulnerability database %s into %s (once)\n", mod.Version, dir)
	tmp, err := os.MkdirTemp(cache, "vulndb-tmp-")
	if err != nil {
		return "", fmt.Errorf("creating a folder for the database: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "db")
	cmd := exec.CommandContext(ctx, "go", "-C", tools, "tool", "indexdb", "-vulns", filepath.Join(mod.Dir, "data", "osv"), "-out", out)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("indexing the database snapshot %s: %w", mod.Version, err)
	}
	// Renamed into place only when whole, so that a run cut short is
	// redone rather than read half written.
	if err := os.Rename(out, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "index", "db.json")); serr == nil {
			return dir, nil // another run put it there first
		}
		return "", fmt.Errorf("moving the database into the cache: %w", err)
	}
	return dir, nil
}

// module is what `go mod download -json` says of a module.
type module struct {
	Version, Dir, Error string
}

// vulndbModule downloads (once; the go command caches it) the
// golang.org/x/vulndb snapshot the tools module pins.
func vulndbModule(ctx context.Context, tools string) (module, error) {
	out, err := exec.CommandContext(ctx, "go", "-C", tools, "mod", "download", "-json", "golang.org/x/vulndb").Output()
	var m module
	if jerr := json.Unmarshal(out, &m); jerr != nil && err == nil {
		err = jerr
	}
	if err == nil && m.Error != "" {
		err = errors.New(m.Error)
	}
	if err != nil {
		return module{}, fmt.Errorf("downloading the vulnerability database snapshot golang.org/x/vulndb: %w", err)
	}
	return m, nil
}
