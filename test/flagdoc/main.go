// Command flagdoc writes docs/reference/flags.md from the -help of the
// broker, its status and release subcommands, and the example handler, so
// that the flag reference says what the binaries say. 'make docs' runs it;
// its test fails when the committed page differs from what it generates.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// page is where the reference lives, relative to the module root.
const page = "docs/reference/flags.md"

func main() {
	root := flag.String("root", ".", "the module root: the commands are built from it and the page written under it")
	flag.Parse()
	if err := write(*root); err != nil {
		fmt.Fprintln(os.Stderr, "flagdoc:", err)
		os.Exit(1)
	}
}

func write(root string) error {
	text, err := generate(root)
	if err != nil {
		return err
	}
	path := filepath.Join(root, page)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("making the folder of %s: %w", path, err)
	}
	if err := os.WriteFile(path, text, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
