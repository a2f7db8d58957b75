package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// denyLabel installs a ValidatingAdmissionPolicy that refuses, with 403
// Forbidden, any widget in ns labelled key, until the test ends or remove
// is called.
func denyLabel(t *testing.T, cp *controlplane.ControlPlane, ns, key string) (remove func()) {
	t.Helper()
	ctx := context.Background()
	api := cp.Client().AdmissionregistrationV1()
	name := "deny-" + ns
	forbidden := metav1.StatusReasonForbidden
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{widgetGVR.Group}, APIVersions: []string{widgetGVR.Version}, Resources: []string{widgetGVR.Resource},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.metadata.labels) || !('" + key + "' in object.metadata.labels)",
				Message:    "label " + key + " is not allowed here",
				Reason:     &forbidden,
			}},
		},
	}
	if _, err := api.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the policy: %v", err)
	}
	t.Cleanup(func() {
		_ = api.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	pb := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, pb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the policy binding: %v", err)
	}
	remove = func() {
		_ = api.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = api.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	t.Cleanup(remove)
	// Policies take effect once the API server has loaded them: wait until a
	// labelled widget is refused.
	dyn := cp.Dynamic(t)
	probe := widget(ns, "policy-probe", map[string]any{"size": int64(1)})
	probe.SetLabels(map[string]string{key: "x"})
	eventually(t, "the policy in force", func() bool {
		_, err := dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, probe, metav1.CreateOptions{})
		if err == nil {
			_ = dyn.Resource(widgetGVR).Namespace(ns).Delete(ctx, probe.GetName(), metav1.DeleteOptions{})
			return false
		}
		return strings.Contains(err.Error(), "is not allowed here")
	})
	return remove
}

// TestRefusedHandlerPatchIsDroppedNotRetriedForever: a policy refuses the
// label the handler's create sets (403). The handler's patch is dropped
// with a Warning Event; the hold and the progress are written without it,
// so the create is not run again and deleting the object runs its delete.
func TestRefusedHandlerPatchIsDroppedNotRetriedForever(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	denyLabel(t, cp, ns, "denied")
	addr := startBroker(t, cp, withAbsence(time.Minute, time.Hour))
	h := startHandlerProcess(t, addr, "refused", ns, "--set-label", "denied=yes")
	createHeld(t, cp, ns, "refused", "w")
	eventually(t, "a Warning Event about the refused patch", func() bool {
		return hasEvent(t, cp, ns, "w", "InvalidPatch", "refused the patch of handler \"refused\"")
	})
	if obj := get(t, dyn, widgetGVR, ns, "w"); obj.GetLabels()["denied"] != "" {
		t.Errorf("the refused label was written: %v", obj.GetLabels())
	}
	h.deleteRunsItsDelete(t, dyn, ns, "w")
	if n := h.out.Count(func(l string) bool { return l == "CREATE "+ns+"/w" }); n != 1 {
		t.Errorf("the create ran %d times, want once", n)
	}
}

// TestOversizedAnnotationsDropTheResultNotTheHold: the object's
// annotations are already near the API server's 256 KiB limit (another
// controller's), so the broker's write with the handler's result is refused
// (422). The result is dropped with a Warning Event; the hold and the
// progress still go on, and the object's deletion runs its delete.
func TestOversizedAnnotationsDropTheResultNotTheHold(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Minute, time.Hour))
	h := startHandlerProcess(t, addr, "bulky", ns, "--result-bytes", "12000")
	w := widget(ns, "w", map[string]any{"size": int64(1)})
	w.SetAnnotations(map[string]string{"other.example.com/blob": strings.Repeat("b", 250<<10)})
	create(t, dyn, widgetGVR, w)
	waitObject(t, dyn, widgetGVR, ns, "w", "held despite the refused result", heldBy("bulky"))
	eventually(t, "a Warning Event about the refused patch", func() bool {
		return hasEvent(t, cp, ns, "w", "InvalidPatch", "refused the patch of handler \"bulky\"")
	})
	for k := range get(t, dyn, widgetGVR, ns, "w").GetAnnotations() {
		if strings.Contains(k, "result") {
			t.Errorf("the refused result was written: %s", k)
		}
	}
	h.deleteRunsItsDelete(t, dyn, ns, "w")
}

// TestRefusedPatchIsNotRecordedAsHandled: the state the broker records as
// handled is the object's, not what the dropped patch would have made it.
// Once the policy is gone, a user who makes that very change gets it
// delivered as an update.
func TestRefusedPatchIsNotRecordedAsHandled(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	allow := denyLabel(t, cp, ns, "denied")
	addr := startBroker(t, cp)
	var j journal
	h := sdk.New("refused", handlerOpts(t)...)
	h.OnCreate(widgets, j.record(func(_ context.Context, ev *sdk.Event) error {
		ev.SetLabel("denied", "yes")
		return nil
	}), sdk.Namespaces(ns))
	h.OnUpdate(widgets, j.record(nil), sdk.Namespaces(ns))
	runHandler(t, h, addr)
	create(t, dyn, widgetGVR, widget(ns, "w", map[string]any{"size": int64(1)}))
	eventually(t, "a Warning Event about the refused patch", func() bool {
		return hasEvent(t, cp, ns, "w", "InvalidPatch", `refused the patch of handler "refused"`)
	})

	eventually(t, "the handling recorded", func() bool {
		return get(t, dyn, widgetGVR, ns, "w").GetAnnotations()["refused.tether.dev/last-handled"] != ""
	})
	allow()
	eventually(t, "the policy gone", func() bool {
		probe := widget(ns, "gone-probe", nil)
		probe.SetLabels(map[string]string{"denied": "x"})
		_, err := dyn.Resource(widgetGVR).Namespace(ns).Create(context.Background(), probe, metav1.CreateOptions{})
		return err == nil
	})
	obj := get(t, dyn, widgetGVR, ns, "w")
	obj.SetLabels(map[string]string{"denied": "yes"})
	if _, err := dyn.Resource(widgetGVR).Namespace(ns).Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The user's update is the only one: a state recorded with the dropped
	// label would have made the broker's own write of it look like an
	// update that took the label away.
	eventually(t, "the user's update delivered", func() bool {
		for _, ev := range j.find(sdk.Update, "w") {
			if ev.Object().GetLabels()["denied"] == "yes" {
				return true
			}
		}
		return false
	})
	if got := j.find(sdk.Update, "w"); len(got) != 1 {
		t.Errorf("%d updates delivered for w, want the user's only", len(got))
	}
}
