package pyhandler

import (
	"fmt"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/controlplane"
)

// TestAFailingDaemonIsRestartedAfterItsDelayAndCountsItsRetries: the
// flaky daemon raises TemporaryError(delay=0.2) while its retry is under 3.
// Each restart comes after that delay, not the binding's backoff of a
// minute, and tells the daemon how many runs failed before it, so the
// fourth run goes on.
func TestAFailingDaemonIsRestartedAfterItsDelayAndCountsItsRetries(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := startHandler(t, b.addr, "py-flaky", "--namespace", ns, "--daemons")
	h.stdout.wait(t, welcomed, 1)

	began := time.Now()
	createWidget(t, dyn, ns, "f", map[string]any{"flaky": true})
	for retry := 0; retry <= 3; retry++ {
		h.stdout.wait(t, fmt.Sprintf("flaky daemon retry %d %s/f", retry, ns), 1)
	}
	h.stdout.wait(t, "flaky daemon running "+ns+"/f", 1)
	if took := time.Since(began); took > time.Minute/2 {
		t.Errorf("the daemon ran after %v: its restarts waited for the backoff of a minute", took)
	}
	if n := h.stdout.count("flaky daemon retry 0 "); n != 1 {
		t.Errorf("the first run was started %d times", n)
	}
}

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
