package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/bench/timerstats"
	"github.com/tether-dev/tether/test/controlplane"
)

func TestParseTimerHandler(t *testing.T) {
	for _, h := range []string{"", timerHandlerGo, timerHandlerPython, timerHandlerPythonSync, timerHandlerTypeScript} {
		c := &config{duration: time.Minute, timerHandler: h}
		if err := c.parseTimers("10", "1s", "plain", false); err != nil {
			t.Errorf("-timer-handler %q: %v", h, err)
		}
		if h == "" && c.timerHandler != timerHandlerGo {
			t.Errorf("no -timer-handler: %q, want go", c.timerHandler)
		}
	}
	c := &config{duration: time.Minute, timerHandler: "rust"}
	if err := c.parseTimers("10", "1s", "plain", false); err == nil {
		t.Error("-timer-handler rust: no error")
	}
	if timerHandlerPkg(timerHandlerPython) != "" || timerHandlerPkg(timerHandlerTypeScript) != "" || timerHandlerPkg(timerHandlerGo) == "" {
		t.Error("only the Go handler is built")
	}
}

func TestHandlerCommand(t *testing.T) {
	e := &env{config: &config{window: 256, noHold: true, python: defaultPython}, work: "/w", repo: "/repo"}
	r := &timerRun{e: e, id: "sharp-1s-10", interval: time.Second, sharp: true}
	e.timerHandler = timerHandlerGo
	prog, args, environ := r.handlerCommand(binaries{handler: "/w/bench-handler"}, "127.0.0.1:1", "ns")
	want := []string{"-addr", "127.0.0.1:1", "-name", "timers", "-namespace", "ns", "-interval", "1s", "-window", "256",
		"-stats", "/w/sharp-1s-10-stats.json", "-window-file", "/w/sharp-1s-10-window.json", "-summary", "/w/sharp-1s-10-summary.json",
		"-sharp", "-no-hold"}
	if prog != "/w/bench-handler" || !slices.Equal(args, want) || environ != nil {
		t.Errorf("go: %s %q %q", prog, args, environ)
	}
	e.timerHandler = timerHandlerPythonSync
	prog, args, environ = r.handlerCommand(binaries{}, "127.0.0.1:1", "ns")
	want = []string{"/repo/test/bench/timerhandler/handler.py", "--addr", "127.0.0.1:1", "--name", "timers", "--namespace", "ns",
		"--interval", "1s", "--window", "256", "--stats", "/w/sharp-1s-10-stats.json", "--ticks", "/w/sharp-1s-10-ticks.json",
		"--sync", "--sharp", "--no-hold"}
	if prog != defaultPython || !slices.Equal(args, want) || !slices.Contains(environ, "PYTHONPATH=/repo/sdk/python") {
		t.Errorf("python-sync: %s %q %q", prog, args, environ)
	}
	e.timerHandler = timerHandlerTypeScript
	prog, args, environ = r.handlerCommand(binaries{}, "127.0.0.1:1", "ns")
	want = []string{"/repo/test/bench/timerhandler/handler.js", "--addr", "127.0.0.1:1", "--name", "timers", "--namespace", "ns",
		"--interval", "1s", "--window", "256", "--stats", "/w/sharp-1s-10-stats.json", "--ticks", "/w/sharp-1s-10-ticks.json",
		"--sharp", "--no-hold"}
	if prog != "node" || !slices.Equal(args, want) || environ != nil {
		t.Errorf("typescript: %s %q %q", prog, args, environ)
	}
}

// pythonProgram drives handler.py's own functions through the SDK's
// FakeBroker (no broker, no cluster): the timer binding it registers, with
// an async and a plain function, gets ticks due at base + k×500 ms, and the
// handler writes its progress and ticks files.
const pythonProgram = `
import datetime, sys, threading
import tether
from tether.testing import FakeBroker
sys.path.insert(0, sys.argv[1])
import handler

base_us, out = int(sys.argv[2]), sys.argv[3]
base = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(microseconds=base_us)
rec = handler.Recorder()
for sync in (False, True):
    reg = tether.Registry()
    handler.register(rec, interval=1.0, namespace="ns", sharp=True, sync=sync, registry=reg)
    for k, uid in ((0, "a"), (2, "a"), (4, "a"), (1, "b")):
        k += 6 * sync
        w = {"apiVersion": "test.tether.dev/v1", "kind": "Widget",
             "metadata": {"name": uid, "namespace": "ns", "uid": uid}}
        got = FakeBroker(reg).tick(w, scheduled=base + datetime.timedelta(milliseconds=500 * k))
        assert got.outcome == "ok", got
stop = threading.Event()
stop.set()
handler.write_progress(rec, out + "/stats.json", stop)
handler.write_json(out + "/ticks.json", rec.ticks())
`

// TestPythonHandlerTicks checks the Python handler's files against the Go
// side that reads them: readStats and timerstats.ReadTicks, Summarize.
func TestPythonHandlerTicks(t *testing.T) {
	python := defaultPython
	if _, err := checkPython(context.Background(), python); err != nil {
		t.Skip(err)
	}
	wd, _ := os.Getwd()
	repo, err := controlplane.FindRepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Ticks due a minute ago, on whole microseconds (as datetimes have them).
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	cmd := exec.Command(python, "-c", pythonProgram, filepath.Join(repo, "test", "bench", "timerhandler"),
		strconv.FormatInt(base.UnixMicro(), 10), dir)
	cmd.Env = append(os.Environ(), pythonEnv(repo)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	st, err := (&timerRun{stats: filepath.Join(dir, "stats.json")}).readStats()
	if err != nil || st.Ticks != 8 || st.Objects != 2 || st.LastUnixNano <= 0 {
		t.Errorf("progress %+v, %v", st, err)
	}
	tk, err := timerstats.ReadTicks(filepath.Join(dir, "ticks.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tk.UIDs, ",") != "a,b" || tk.Len() != 8 {
		t.Fatalf("ticks of %q: %d", tk.UIDs, tk.Len())
	}
	for i, k := range []int64{0, 2, 4, 1, 6, 8, 10, 7} {
		if due := base.UnixNano() + k*int64(500*time.Millisecond); tk.Scheduled[i] != due {
			t.Errorf("tick %d scheduled %d, want %d", i, tk.Scheduled[i], due)
		}
		if late := time.Duration(tk.Arrival[i] - tk.Scheduled[i]); late < 50*time.Second || tk.Ack[i] < tk.Arrival[i] {
			t.Errorf("tick %d: lateness %s, ack %d before arrival %d", i, late, tk.Ack[i], tk.Arrival[i])
		}
	}
	// On the 1 s grid from base, the window [base, base+3s) has a due at 0,
	// 1 and 2 s and b at 0.5 s (then missed at 1.5 and 2.5 s).
	w := timerstats.Window{FromUnixNano: base.UnixNano(), ToUnixNano: base.Add(3 * time.Second).UnixNano()}
	ws := timerstats.Summarize(tk, &w, timerstats.Schedule{Interval: time.Second, Sharp: true}).InWindow
	if ws.Delivered != 4 || ws.Missed != 2 || ws.Objects != 2 {
		t.Errorf("window: %d delivered, %d missed, %d objects; want 4, 2, 2", ws.Delivered, ws.Missed, ws.Objects)
	}
}
