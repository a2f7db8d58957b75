package pyhandler

import (
	"testing"

	"github.com/tether-dev/tether/test/controlplane"
)

// TestADaemonThatIgnoresStoppedIsCancelledAndStartsAgain: the stubborn
// daemon never looks at stopped. When its widget stops matching, the
// broker waits its cancellation timeout (1 s) for the stop and then gives
// up; the SDK cancels the async function, so when the widget matches again
// the daemon starts again on the same instance.
func TestADaemonThatIgnoresStoppedIsCancelledAndStartsAgain(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := startHandler(t, b.addr, "py-stubborn", "--namespace", ns, "--daemons")
	h.stdout.wait(t, welcomed, 1)
	w := ns + "/s"

	createWidget(t, dyn, ns, "s", map[string]any{"stubborn": true})
	h.stdout.wait(t, "stubborn daemon started "+w, 1)
	patchWidget(t, dyn, ns, "s", `{"spec":{"stubborn":false}}`)
	h.stdout.wait(t, "stubborn daemon cancelled "+w, 1)
	patchWidget(t, dyn, ns, "s", `{"spec":{"stubborn":true}}`)
	h.stdout.wait(t, "stubborn daemon started "+w, 2)
}
