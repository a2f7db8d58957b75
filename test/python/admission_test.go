package pyhandler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/test/controlplane"
)

const (
	seenLabel = "python.tether.dev/seen"
	// sizeMessage is part of the Python handler's refusal.
	sizeMessage = "a widget may be at most 10"
)

// TestAdmissionRefusesBigWidgetsAndLabelsOthers: with --admission the
// Python handler answers the API server's reviews of Widgets, which the
// broker serves as webhooks. A widget larger than 10 is refused with the
// handler's message and code 422, on create and on update; an admitted one
// is stored with the label the handler's own JSON patch adds, both when the
// widget has no labels (the patch adds the map) and when it has some (the
// patch adds one key, "/" escaped as "~1").
func TestAdmissionRefusesBigWidgetsAndLabelsOthers(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	admin := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0", func(o *broker.Options) {
		// The Secret with the generated CA goes there, apart from other brokers'.
		o.Namespace = cp.Namespace(t)
		o.Admission = broker.Admission{Listen: "127.0.0.1:0"}
	})
	h := startHandler(t, b.addr, "py-admission", "--namespace", ns, "--admission")
	h.stdout.wait(t, welcomed, 1)
	dyn := asTester(t, cp)
	widgets := dyn.Resource(widgetGVR).Namespace(ns)
	ctx := context.Background()

	// The API server starts calling a new webhook configuration a moment
	// after it is created: probe until the refusal is enforced. A probe
	// admitted before that stays in the test's namespace.
	probes := 0
	probe := func(prefix string, size int64) (string, error) {
		probes++
		name := fmt.Sprintf("%s-%d", prefix, probes)
		_, err := widgets.Create(ctx, newWidget(ns, name, map[string]any{"size": size}), metav1.CreateOptions{})
		return name, err
	}
	var big string
	var err error
	eventually(t, "a widget of size 11 to be refused", func() bool {
		big, err = probe("big", 11)
		return err != nil
	})
	wantSizeRefusal(t, "creating a widget of size 11", err)
	if getWidget(t, admin, ns, big) != nil {
		t.Errorf("the refused widget %s was stored", big)
	}
	h.stdout.wait(t, "review validate-size CREATE "+ns+"/"+big+": refused (422: ", 1)

	// The mutating configuration is a separate object, enforced on its own time.
	var small *unstructured.Unstructured
	eventually(t, "a widget of size 3 to be stored with the label "+seenLabel, func() bool {
		name, err := probe("small", 3)
		if err != nil {
			t.Fatalf("creating a widget of size 3: %v", err)
		}
		small = getWidget(t, admin, ns, name)
		return small != nil && small.GetLabels()[seenLabel] == "true"
	})
	h.stdout.wait(t, "review mark-seen CREATE "+ns+"/"+small.GetName()+
		`: allowed with patch [{"op":"add","path":"/metadata/labels","value":{"`+seenLabel+`":"true"}}]`, 1)

	labelled := newWidget(ns, "labelled", map[string]any{"size": int64(3)})
	labelled.SetLabels(map[string]string{"app": "demo"})
	if _, err := widgets.Create(ctx, labelled, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a labelled widget of size 3: %v", err)
	}
	if got := getWidget(t, admin, ns, "labelled").GetLabels(); got["app"] != "demo" || got[seenLabel] != "true" {
		t.Errorf("stored labels %v, want app=demo and %s=true", got, seenLabel)
	}
	h.stdout.wait(t, `review mark-seen CREATE `+ns+`/labelled: allowed with patch [{"op":"add","path":"/metadata/labels/python.tether.dev~1seen"`, 1)

	_, err = widgets.Patch(ctx, "labelled", types.MergePatchType, []byte(`{"spec":{"size":12}}`), metav1.PatchOptions{})
	wantSizeRefusal(t, "growing a widget to size 12", err)
	if size, _, _ := unstructured.NestedInt64(getWidget(t, admin, ns, "labelled").Object, "spec", "size"); size != 3 {
		t.Errorf("stored size %d after the refused update, want 3", size)
	}
}

// wantSizeRefusal fails the test unless err is the handler's refusal of a
// widget larger than 10: code 422 and its message.
func wantSizeRefusal(t *testing.T, what string, err error) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusUnprocessableEntity || !strings.Contains(err.Error(), sizeMessage) {
		t.Fatalf("%s: want code 422 with %q, got %v", what, sizeMessage, err)
	}
	t.Logf("%s: %v", what, err)
}

// asTester is a client that impersonates another user than the broker's:
// the broker's own writes are never reviewed, and it uses the same admin
// credentials as the test.
func asTester(t *testing.T, cp *controlplane.ControlPlane) dynamic.Interface {
	t.Helper()
	cfg := rest.CopyConfig(cp.RESTConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tester", Groups: []string{"system:masters", "system:authenticated"}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("a client impersonating the tester: %v", err)
	}
	return dyn
}
