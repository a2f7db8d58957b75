// Command conformance checks a handler against the rules of
// docs/protocol.md: it starts a control plane, the broker and the handler
// under test, drives one scenario per rule through a proxy that records the
// stream, and prints a line per rule and a JSON report.
//
//	go run ./test/conformance [-json report.json] [-dir logs] -- <command that starts the handler>
//
// The handler is a small program each SDK provides to the spec in
// test/conformance/README.md. The exit status is 0 when every rule passes,
// 1 when one fails, 2 for bad usage or a kit that could not run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

func mainErr(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonPath := fs.String("json", "", "write the JSON report to this file (default: standard output, after the lines)")
	dir := fs.String("dir", "", "folder for the logs of the control plane, the broker and the handler (default: a new temporary one, removed when every rule passes)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./test/conformance [-json FILE] [-dir DIR] -- <command that starts the handler>")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	temporary := *dir == ""
	if temporary {
		d, err := os.MkdirTemp("", "tether-conformance-")
		if err != nil {
			fmt.Fprintln(stderr, "conformance:", err)
			return 2
		}
		*dir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, options{command: fs.Args(), dir: *dir, progress: stderr})
	if err != nil {
		fmt.Fprintln(stderr, "conformance:", err)
		return 2
	}
	out, _ := json.MarshalIndent(rep, "", "  ")
	if *jsonPath == "" {
		fmt.Fprintln(stdout, string(out))
	} else if err := os.WriteFile(*jsonPath, append(out, '\n'), 0o644); err != nil {
		fmt.Fprintln(stderr, "conformance: writing the report:", err)
		return 2
	}
	if !rep.Passed {
		fmt.Fprintln(stderr, "conformance: FAILED; logs in", *dir)
		return 1
	}
	fmt.Fprintln(stderr, "conformance: every rule passed")
	if temporary {
		_ = os.RemoveAll(*dir) // the logs of a run that passed tell nothing
	}
	return 0
}
