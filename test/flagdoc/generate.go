package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// command is one section of the page: a binary run with args plus -help.
type command struct {
	title string // how a user types it
	bin   string // the package under cmd/ that builds it
	args  []string
}

var commands = []command{
	{title: "broker", bin: "broker"},
	{title: "broker status", bin: "broker", args: []string{"status"}},
	{title: "broker release", bin: "broker", args: []string{"release"}},
	{title: "broker relay", bin: "broker", args: []string{"relay"}},
	{title: "example-handler", bin: "example-handler"},
}

// envDefaults are the variables some defaults are read from (the broker's
// --namespace, --identity, --deployment, --leader-elect-pod,
// --leader-elect-liveness-address, the relay's --pod-ip); the commands
// run without them, so that the page shows the defaults a binary has when they are not set, wherever it is
// generated.
var envDefaults = []string{"POD_NAME", "POD_NAMESPACE", "POD_IP", "TETHER_DEPLOYMENT", "KUBERNETES_SERVICE_HOST"}

// generate builds the commands from the module at root, runs each with
// -help and renders the page.
func generate(root string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "tether-flagdoc-")
	if err != nil {
		return nil, fmt.Errorf("making a folder for the binaries: %w", err)
	}
	defer os.RemoveAll(dir)
	built := map[string]string{}
	var sections []section
	for _, c := range commands {
		bin, ok := built[c.bin]
		if !ok {
			if bin, err = build(root, dir, c.bin); err != nil {
				return nil, err
			}
			built[c.bin] = bin
		}
		help, err := runHelp(bin, c.args)
		if err != nil {
			return nil, fmt.Errorf("running %s -help: %w", c.title, err)
		}
		s, err := parseHelp(c.title, help)
		if err != nil {
			return nil, fmt.Errorf("reading the -help of %s: %w", c.title, err)
		}
		sections = append(sections, s)
	}
	return render(sections), nil
}

func build(root, dir, name string) (string, error) {
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cmd/%s: %w\n%s", name, err, out)
	}
	return bin, nil
}

// runHelp returns what the command prints for -help. The flag package makes
// that an error exit (the broker exits 2), so the exit code is not judged,
// only that the usage came out.
func runHelp(bin string, args []string) (string, error) {
	cmd := exec.Command(bin, append(append([]string{}, args...), "-help")...)
	cmd.Env = withoutDefaults(os.Environ())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return "", err
	}
	return out.String(), nil
}

func withoutDefaults(env []string) []string {
	var kept []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(envDefaults, name) {
			kept = append(kept, kv)
		}
	}
	return kept
}
