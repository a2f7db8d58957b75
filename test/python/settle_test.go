package pyhandler

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/progress"
	"github.com/tether-dev/tether/test/controlplane"
)

// kopfHeldUpdate prints each update it is given, then holds it until the
// file goFile exists (at most 30 s), so that a test can change the widget
// while the update is under way, before the broker writes what was
// handled.
func kopfHeldUpdate(goFile string) string {
	return fmt.Sprintf(`import os, time
import tether as kopf

@kopf.on.update("widgets")
def updated(name, new, **_):
    print("updated", name, new["spec"]["size"])
    deadline = time.monotonic() + 30
    while not os.path.exists(%q) and time.monotonic() < deadline:
        time.sleep(0.01)
`, goFile)
}

// TestAChangeMadeWhileItsUpdateRunsIsDeliveredNext: a user changes a
// widget while the handler is still on its previous update. The broker's
// write of what was handled then lands on the changed widget (a patch of
// annotations alone does not test the resourceVersion), and the change
// must still be delivered, as an update of its own.
func TestAChangeMadeWhileItsUpdateRunsIsDeliveredNext(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	goFile := filepath.Join(t.TempDir(), "go")
	h := runKopfStyle(t, b.addr, "kopf-settle", ns, kopfHeldUpdate(goFile))
	h.stderr.wait(t, welcomed, 1)

	createWidget(t, dyn, ns, "w", map[string]any{"size": int64(1)})
	// Seen at size 1 before it changes: a widget the broker first sees at
	// size 2 is new to it, with no update to deliver.
	waitWidget(t, dyn, ns, "w", "its first state recorded", func(o *unstructured.Unstructured) bool {
		return o.GetAnnotations()[progress.LastHandledKey("kopf-settle")] != ""
	})
	patchWidget(t, dyn, ns, "w", `{"spec":{"size":2}}`)
	h.stdout.wait(t, "updated w 2", 1)
	patchWidget(t, dyn, ns, "w", `{"spec":{"size":3}}`) // while the update to 2 is held
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.stdout.wait(t, "updated w 3", 1)
}
