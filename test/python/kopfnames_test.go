package pyhandler

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/test/controlplane"
)

// kopfNamed is a handler written as a Kopf user writes one: imported as
// kopf, each binding naming the Widget another way, none with a version.
const kopfNamed = `import tether as kopf

@kopf.on.create("widgets")
def by_plural(name, **_):
    print("plural saw", name)

@kopf.on.create("wdg")
def by_short_name(name, **_):
    print("short name saw", name)

@kopf.on.create("Widget")
def by_kind(name, **_):
    print("kind saw", name)

@kopf.on.create("test.tether.dev", "widget")
def by_group_and_singular(name, **_):
    print("group and singular saw", name)

@kopf.on.create("widgets.test.tether.dev")
def by_dotted_name(name, resource, **_):
    print("dotted name saw", name, "as", resource.plural, resource.version, resource.group)
`

// gadgetCRD is a cluster-scoped resource named "gadgets" in group g, so
// that two groups serve the same name.
func gadgetCRD(group string) string {
	return fmt.Sprintf(`{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "gadgets.%[1]s"},
  "spec": {"group": "%[1]s", "scope": "Cluster",
    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}`, group)
}

// runKopfStyle runs source with `python3 -m tether run` against addr.
func runKopfStyle(t *testing.T, addr, name, ns, source string) *handlerProcess {
	t.Helper()
	script := filepath.Join(t.TempDir(), name+".py")
	if err := os.WriteFile(script, []byte(source), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-E", "-s", "-B", "-u", "-m", "tether", "run", script,
		"--broker", addr, "--insecure", "--name", name, "--namespace", ns)
	cmd.Dir = sdkDir
	return startProcess(t, name, cmd)
}

// TestKopfStyleResourceNamesResolve: a binding named by plural, short name,
// kind, singular with its group, or "plural.group", with no version, is
// resolved by the broker to the Widget's preferred version, and each gets
// the Widget's create.
func TestKopfStyleResourceNamesResolve(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := runKopfStyle(t, b.addr, "kopf-names", ns, kopfNamed)
	h.stderr.wait(t, welcomed, 1)

	createWidget(t, dyn, ns, "w", nil)
	for _, saw := range []string{"plural", "short name", "kind", "group and singular"} {
		h.stdout.wait(t, saw+" saw w", 1)
	}
	h.stdout.wait(t, "dotted name saw w as widgets v1 test.tether.dev", 1)
}

// TestKopfStyleNamesTheBrokerCannotPinAreRefusedWithCandidates: a name
// that two groups serve, and a misspelt one, are refused at Hello; the
// handler exits with the broker's answer, which lists the resources.
func TestKopfStyleNamesTheBrokerCannotPinAreRefusedWithCandidates(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	dyn := cp.Dynamic(t)
	for _, g := range []string{"a.names.tether.dev", "b.names.tether.dev"} {
		if err := controlplane.InstallCRD(context.Background(), dyn, gadgetCRD(g), waitTimeout); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = dyn.Resource(controlplane.CRDGVR).Delete(context.Background(), "gadgets."+g, metav1.DeleteOptions{})
		})
	}
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	for _, tc := range []struct{ name, source, want string }{
		{"ambiguous", "import tether as kopf\n\n@kopf.on.create(\"gadgets\")\ndef f(**_):\n    pass\n",
			"gadgets.v1.a.names.tether.dev, gadgets.v1.b.names.tether.dev; name the group"},
		{"misspelt", "import tether as kopf\n\n@kopf.on.create(\"widgtes\")\ndef f(**_):\n    pass\n",
			"widgtes in any API group's preferred version: resource not found; did you mean widgets.v1.test.tether.dev?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := runKopfStyle(t, b.addr, "kopf-"+tc.name, ns, tc.source)
			if code := h.waitExit(t, waitTimeout); code != 2 {
				t.Errorf("the handler exited with %d, want 2 (refused)", code)
			}
			if !h.stderr.has(tc.want) {
				t.Errorf("the handler's error does not say %q:\n%s", tc.want, h.stderr.text())
			}
		})
	}
}

// kopfFieldFilters filters by field as Kopf does: a value and PRESENT on
// creates, and an update that runs only when spec.size changed. Each is
// CEL the broker compiles at Hello and evaluates.
const kopfFieldFilters = `import tether as kopf

@kopf.on.create("widgets", field="spec.mode", value="fast")
def fast(name, **_):
    print("fast", name)

@kopf.on.create("widgets", field=("metadata", "labels", "example.com/tier"), value=kopf.PRESENT)
def tiered(name, **_):
    print("tiered", name)

@kopf.on.update("widgets", field="spec.size")
def resized(name, old, new, **_):
    print("resized", name, old["spec"].get("size"), new["spec"].get("size"))

@kopf.on.update("widgets", id="any-update")
def updated(name, **_):
    print("updated", name)
`

// TestKopfStyleFieldFiltersNarrowDeliveries: a widget whose field has the
// value gets the create, one without does not; an update of another field
// does not run the function filtered on spec.size, a change of spec.size
// does.
func TestKopfStyleFieldFiltersNarrowDeliveries(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := runKopfStyle(t, b.addr, "kopf-fields", ns, kopfFieldFilters)
	h.stderr.wait(t, welcomed, 1)

	createWidget(t, dyn, ns, "slow", map[string]any{"mode": "slow", "size": int64(1)})
	createWidget(t, dyn, ns, "quick", map[string]any{"mode": "fast", "size": int64(1)})
	h.stdout.wait(t, "fast quick", 1)

	patchWidget(t, dyn, ns, "slow", `{"metadata":{"labels":{"example.com/tier":"gold"}},"spec":{"mode":"slower"}}`)
	h.stdout.wait(t, "updated slow", 1)
	patchWidget(t, dyn, ns, "slow", `{"spec":{"size":2}}`)
	h.stdout.wait(t, "resized slow 1 2", 1)
	if h.stdout.has("fast slow") {
		t.Error("the create filtered on spec.mode=fast ran for a slow widget")
	}
	if n := h.stdout.count("resized slow"); n != 1 {
		t.Errorf("the update filtered on spec.size ran %d times for one change of it, want 1 (not for the label)", n)
	}
}
