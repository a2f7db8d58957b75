package pyhandler

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tether-dev/tether/test/controlplane"
)

// kopfEmbedded runs the operator in a thread of its own, as Kopf's
// embedding docs do: tether.operator with Kopf's ready_flag and stop_flag
// (threading.Events), stopped by the flag once the create was handled.
const kopfEmbedded = `import asyncio, sys, threading
import tether as kopf

broker, namespace = sys.argv[1:3]
handled, ready, stop = threading.Event(), threading.Event(), threading.Event()

@kopf.on.create("widgets")
def created(name, **_):
    print("created", name, flush=True)
    handled.set()

def main():
    asyncio.run(kopf.operator(name="py-embedded", broker=broker, insecure=True, namespaces=[namespace],
                              ready_flag=ready, stop_flag=stop))

thread = threading.Thread(target=main)
thread.start()
if not ready.wait(30):
    print("never ready", flush=True)
    stop.set()
    sys.exit(2)
print("ready", flush=True)
handled.wait(30)
stop.set()
thread.join(30)
print("still running" if thread.is_alive() else "stopped", flush=True)
sys.exit(1 if thread.is_alive() else 0)
`

// TestAnEmbeddedOperatorStopsByItsStopFlag: tether.operator, run in a
// thread with Kopf's flags, sets ready_flag once the broker welcomed it,
// handles a create, and returns when stop_flag is set from another
// thread, so the script ends by itself.
func TestAnEmbeddedOperatorStopsByItsStopFlag(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	script := filepath.Join(t.TempDir(), "embedded.py")
	if err := os.WriteFile(script, []byte(kopfEmbedded), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-s", "-B", "-u", script, b.addr, ns)
	cmd.Dir = sdkDir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+sdkDir)
	p := startProcess(t, "embedded", cmd)
	p.stdout.wait(t, "ready", 1)
	createWidget(t, dyn, ns, "w", nil)
	if code := p.waitExit(t, waitTimeout+10e9); code != 0 {
		t.Fatalf("the script exited with %d:\n%s", code, p.stdout.text())
	}
	for _, want := range []string{"created w", "stopped"} {
		if !p.stdout.has(want) {
			t.Errorf("the script did not say %q:\n%s", want, p.stdout.text())
		}
	}
}
