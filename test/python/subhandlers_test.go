package pyhandler

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/test/controlplane"
)

// kopfSubhandlers has a create function with a subhandler per item of
// spec.items, as Kopf's subhandlers example does; the second fails once
// with TemporaryError. Each run says so in the log.
const kopfSubhandlers = `import tether as kopf

failed = set()

@kopf.on.create("widgets")
def create_fn(spec, logger, **_):
    logger.info("parent ran")
    for item in spec.get("items", []):
        @kopf.subhandler(id=item)
        def handle_item(item=item, retry=0, **_):
            logger.info(f"item {item} ran")
            if item == "second" and item not in failed:
                failed.add(item)
                raise kopf.TemporaryError("not yet", delay=1)
            return {"done": item, "retry": retry}
`

// TestARetriedParentDoesNotRunItsSubhandlersAgain: the broker keeps the
// progress of the RETRY (which subhandlers are done) and sends it back with
// the next attempt: the parent runs twice, the first and third items once,
// the second twice, and all three results land in status under Kopf's ids.
func TestARetriedParentDoesNotRunItsSubhandlersAgain(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := runKopfStyle(t, b.addr, "py-subhandlers", ns, kopfSubhandlers)
	h.stderr.wait(t, welcomed, 1)

	createWidget(t, dyn, ns, "w", map[string]any{"items": []any{"first", "second", "third"}})
	got := waitWidget(t, dyn, ns, "w", "the three results in status", func(u *unstructured.Unstructured) bool {
		s, _, _ := unstructured.NestedMap(u.Object, "status")
		return len(s) == 3
	})
	want := map[string]any{
		"create_fn/first":  map[string]any{"done": "first", "retry": int64(0)},
		"create_fn/second": map[string]any{"done": "second", "retry": int64(1)},
		"create_fn/third":  map[string]any{"done": "third", "retry": int64(0)},
	}
	if s, _, _ := unstructured.NestedMap(got.Object, "status"); !reflect.DeepEqual(s, want) {
		t.Errorf("status = %v, want %v", s, want)
	}
	for line, n := range map[string]int{"parent ran": 2, "item first ran": 1, "item second ran": 2, "item third ran": 1} {
		if c := h.stderr.count(line); c != n {
			t.Errorf("%q logged %d times, want %d:\n%s", line, c, n, h.stderr.text())
		}
	}
}
