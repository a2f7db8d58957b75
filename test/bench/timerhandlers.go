package main

// The timer handler processes of -timer-handler. Each registers one timer
// binding whose function only records the tick and returns, and writes the
// same progress file (-stats) every second for the warm-up; the measurement
// is timerstats.Summarize in every case:
//
//   - go: test/bench/timerhandler on the Go SDK. On SIGTERM it reads the
//     window the bench wrote and writes its Summarize of it (-summary).
//   - python, python-sync: test/bench/timerhandler/handler.py on the Python
//     SDK (sdk/python), an async function or (python-sync) a plain one run
//     in the SDK's thread pool. On SIGTERM it writes every tick it received
//     (--ticks, timerstats.Ticks), and the bench applies Summarize here.
//   - typescript: test/bench/timerhandler/handler.js on the TypeScript SDK
//     (sdk/typescript, built by npm first), an async function; on SIGTERM it
//     writes its ticks as the Python handler does.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tether-dev/tether/test/bench/timerstats"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/pyinterp"
	"github.com/tether-dev/tether/test/typescript"
)

// The handlers of -timer-handler.
const (
	timerHandlerGo         = "go"
	timerHandlerPython     = "python"      // an async function on the SDK's event loop
	timerHandlerPythonSync = "python-sync" // a plain function in the SDK's thread pool
	timerHandlerTypeScript = "typescript"  // an async function on Node's event loop
)

// defaultPython is the -python default.
const defaultPython = pyinterp.Python

// The script handlers, from the repository root.
var (
	pythonHandler     = filepath.Join("test", "bench", "timerhandler", "handler.py")
	typescriptHandler = filepath.Join("test", "bench", "timerhandler", "handler.js")
)

// isPython reports whether the -timer-handler runs on the Python SDK.
func isPython(handler string) bool {
	return handler == timerHandlerPython || handler == timerHandlerPythonSync
}

// writesTicks reports whether the -timer-handler writes its ticks for the
// bench to summarize, rather than summarizing them itself as the Go
// handler does.
func writesTicks(handler string) bool {
	return isPython(handler) || handler == timerHandlerTypeScript
}

// checkTimerHandler checks -timer-handler.
func checkTimerHandler(handler string) error {
	switch handler {
	case timerHandlerGo, timerHandlerPython, timerHandlerPythonSync, timerHandlerTypeScript:
		return nil
	}
	return fmt.Errorf("-timer-handler: %q is not %s, %s, %s or %s", handler, timerHandlerGo, timerHandlerPython, timerHandlerPythonSync, timerHandlerTypeScript)
}

// timerHandlerPkg is the Go package withEnv builds as the handler; none
// for the script handlers.
func timerHandlerPkg(handler string) string {
	if writesTicks(handler) {
		return ""
	}
	return "./test/bench/timerhandler"
}

// pythonEnv is the Python handler's environment: the SDK from the source
// tree, and no bytecode written into it.
func pythonEnv(repo string) []string {
	return []string{"PYTHONPATH=" + filepath.Join(repo, "sdk", "python"), "PYTHONDONTWRITEBYTECODE=1"}
}

// checkPython makes sure the interpreter runs the SDK, before the control
// plane starts, and describes it for the report: "tether-python 0.1.0,
// CPython 3.11.2, grpcio 1.51.1, protobuf 4.21.12".
func checkPython(ctx context.Context, python string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	repo, err := controlplane.FindRepoRoot(wd)
	if err != nil {
		return "", err
	}
	const probe = `import platform, grpc, google.protobuf, tether
print("tether-python %s, %s %s, grpcio %s, protobuf %s" % (tether.__version__, platform.python_implementation(),
      platform.python_version(), grpc.__version__, google.protobuf.__version__))`
	cmd := exec.CommandContext(ctx, python, "-c", probe)
	cmd.Env = append(os.Environ(), pythonEnv(repo)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("-python %s cannot run the Python SDK (apt-get install -y python3-grpcio python3-protobuf; "+
			"Debian's /usr/bin/python3 sees them, a pyenv python does not): %v\n%s", python, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// checkTypeScript builds the TypeScript SDK (npm ci and tsc, as the tests
// do) before the control plane starts, and describes node for the report.
func checkTypeScript(ctx context.Context) (string, error) {
	if err := typescript.BuildSDK(); err != nil {
		return "", fmt.Errorf("-timer-handler typescript: %w", err)
	}
	out, err := exec.CommandContext(ctx, "node", "--version").Output()
	if err != nil {
		return "", fmt.Errorf("-timer-handler typescript: node --version: %w", err)
	}
	return "node " + strings.TrimSpace(string(out)), nil
}

// handlerCommand is how to start the run's timer handler: the program, its
// arguments and what to add to its environment. It names the files the
// handler writes.
func (r *timerRun) handlerCommand(bin binaries, addr, ns string) (prog string, args, environ []string) {
	e := r.e
	r.stats = filepath.Join(e.work, r.id+"-stats.json")
	if writesTicks(e.timerHandler) {
		r.ticks = filepath.Join(e.work, r.id+"-ticks.json")
		script := pythonHandler
		prog, environ = e.python, pythonEnv(e.repo)
		if e.timerHandler == timerHandlerTypeScript {
			script, prog, environ = typescriptHandler, "node", nil
		}
		args = []string{filepath.Join(e.repo, script), "--addr", addr, "--name", timerHandlerName,
			"--namespace", ns, "--interval", r.interval.String(), "--window", strconv.Itoa(e.window),
			"--stats", r.stats, "--ticks", r.ticks}
		if e.timerHandler == timerHandlerPythonSync {
			args = append(args, "--sync")
		}
		if r.sharp {
			args = append(args, "--sharp")
		}
		if e.noHold {
			args = append(args, "--no-hold")
		}
		return prog, args, environ
	}
	r.win = filepath.Join(e.work, r.id+"-window.json")
	r.summ = filepath.Join(e.work, r.id+"-summary.json")
	args = []string{"-addr", addr, "-name", timerHandlerName, "-namespace", ns,
		"-interval", r.interval.String(), "-window", strconv.Itoa(e.window),
		"-stats", r.stats, "-window-file", r.win, "-summary", r.summ}
	if r.sharp {
		args = append(args, "-sharp")
	}
	if e.noHold {
		args = append(args, "-no-hold")
	}
	if e.profile != "" {
		// The handler profiles itself, warm-up included.
		args = append(args, "-cpuprofile", filepath.Join(e.profile, "handler-"+r.id+".pprof"))
	}
	return bin.handler, args, nil
}

// finish stops the handler with SIGTERM and returns the summary of the
// window w: the Go handler's own, or Summarize of a script handler's ticks.
func (r *timerRun) finish(w timerstats.Window) (*timerstats.Summary, error) {
	script := writesTicks(r.e.timerHandler)
	if !script {
		data, _ := json.Marshal(w)
		if err := os.WriteFile(r.win, data, 0o644); err != nil {
			return nil, err
		}
	}
	r.cancelWatch(context.Canceled) // exits from here on are expected
	stopped := time.Now()
	if err := r.handler.stop(); err != nil {
		return nil, err
	}
	if r.handler.err != nil {
		return nil, r.handler.exited()
	}
	if script {
		ticks, err := timerstats.ReadTicks(r.ticks)
		if err != nil {
			return nil, fmt.Errorf("reading the handler's ticks: %w", err)
		}
		r.e.progressf("%s: the handler stopped and wrote %d ticks in %.1fs", r.label, ticks.Len(), time.Since(stopped).Seconds())
		s := timerstats.Summarize(ticks, &w, timerstats.Schedule{Interval: r.interval, Sharp: r.sharp})
		return &s, nil
	}
	data, err := os.ReadFile(r.summ)
	if err != nil {
		return nil, fmt.Errorf("reading the handler's summary: %w", err)
	}
	var s timerstats.Summary
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.summ, err)
	}
	if s.InWindow == nil {
		return nil, errors.New("the handler's summary has no window")
	}
	return &s, nil
}

// timerHandlerDesc describes the handler for the report's first line.
func timerHandlerDesc(cfg *config) string {
	switch cfg.timerHandler {
	case timerHandlerPython:
		return fmt.Sprintf("handler python (%s, async function; %s)", pythonHandler, cfg.pythonVersion)
	case timerHandlerPythonSync:
		return fmt.Sprintf("handler python-sync (%s --sync, a plain function in the SDK's thread pool; %s)", pythonHandler, cfg.pythonVersion)
	case timerHandlerTypeScript:
		return fmt.Sprintf("handler typescript (%s, async function; %s)", typescriptHandler, cfg.nodeVersion)
	}
	return "handler go (test/bench/timerhandler)"
}
