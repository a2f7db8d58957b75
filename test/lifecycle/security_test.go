package lifecycle

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// secure is a broker over TLS that authenticates and authorizes handlers
// with the real API server, in a namespace of its own that is also where
// the test's objects live and its ServiceAccounts are.
type secure struct {
	cp        *controlplane.ControlPlane
	ns, addr  string
	clientTLS *tls.Config
}

func startSecure(t *testing.T, cp *controlplane.ControlPlane, tweaks ...func(*broker.Options)) *secure {
	t.Helper()
	ns := cp.Namespace(t)
	serverTLS, pool := selfSigned(t)
	addr := startBroker(t, cp, append([]func(*broker.Options){func(o *broker.Options) {
		o.Insecure, o.TLS, o.Namespace = false, serverTLS, ns
	}}, tweaks...)...)
	return &secure{cp: cp, ns: ns, addr: addr, clientTLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
}

// grant gives the ServiceAccount sa the rules in the test's namespace, with
// a Role and a RoleBinding both called name; revoke deletes the binding.
func (s *secure) grant(t *testing.T, name, sa string, rules ...rbacv1.PolicyRule) (revoke func()) {
	t.Helper()
	return s.grantIn(t, s.ns, name, sa, rules...)
}

// grantIn is grant in namespace ns; sa is the test namespace's.
func (s *secure) grantIn(t *testing.T, ns, name, sa string, rules ...rbacv1.PolicyRule) (revoke func()) {
	t.Helper()
	ctx := context.Background()
	rbac := s.cp.Client().RbacV1()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules}
	if _, err := rbac.Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: s.ns}},
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := rbac.RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("revoking %s: %v", name, err)
		}
	}
}

func (s *secure) token(t *testing.T, sa string, audiences ...string) string {
	t.Helper()
	tok, err := s.cp.ServiceAccountToken(context.Background(), s.ns, sa, audiences...)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s *secure) handler(name, token string, opts ...sdk.Option) *sdk.Handler {
	return sdk.New(name, append([]sdk.Option{sdk.WithTLS(s.clientTLS), sdk.WithToken(token),
		sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond)}, opts...)...)
}

// rejected runs h until the broker rejects it, and fails the test if it
// does not within waitTimeout.
func (s *secure) rejected(t *testing.T, h *sdk.Handler) *sdk.RejectedError {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var rej *sdk.RejectedError
	if err := h.Run(ctx, s.addr); !errors.As(err, &rej) {
		t.Fatalf("handler %s: Run = %v, want a rejection", h.Name(), err)
	}
	return rej
}

func expectRejection(t *testing.T, rej *sdk.RejectedError, code string, says ...string) {
	t.Helper()
	if rej.Code != code {
		t.Errorf("rejected with %s (%s), want %s", rej.Code, rej.Message, code)
	}
	for _, w := range says {
		if !strings.Contains(rej.Message, w) {
			t.Errorf("rejection %q does not say %q", rej.Message, w)
		}
	}
}

func widgetRule(verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{"test.tether.dev"}, Resources: []string{"widgets"}, Verbs: verbs}
}

func handlerRule(name string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{"tether.dev"}, Resources: []string{"handlers"}, ResourceNames: []string{name}, Verbs: verbs}
}

func nothing(context.Context, *sdk.Event) error { return nil }

// TestReadAccessCannotHold: a hold is a finalizer, and a finalizer is a
// write. An identity that may only read widgets cannot have the broker
// hold them for it, with a delete, daemon or timer binding, whatever its
// policy; one that may patch them can.
func TestReadAccessCannotHold(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	s := startSecure(t, cp)
	s.grant(t, "reader", "reader", widgetRule("get", "list", "watch"), handlerRule("x", "connect", "strict"))
	s.grant(t, "writer", "writer", widgetRule("get", "list", "watch", "patch"), handlerRule("y", "connect", "strict"))
	create(t, dyn, widgetGVR, widget(s.ns, "w", nil))
	reader := s.token(t, "reader")

	for name, bind := range map[string]func(*sdk.Handler){
		"delete STRICT": func(h *sdk.Handler) {
			h.OnDelete(widgets, nothing, sdk.Namespaces(s.ns), sdk.Finalizer(sdk.FinalizerStrict))
		},
		"delete HOLD": func(h *sdk.Handler) { h.OnDelete(widgets, nothing, sdk.Namespaces(s.ns)) },
		"daemon":      func(h *sdk.Handler) { h.OnDaemon(widgets, nothing, sdk.Namespaces(s.ns)) },
		"timer":       func(h *sdk.Handler) { h.OnTimer(widgets, time.Minute, nothing, sdk.Namespaces(s.ns)) },
	} {
		h := s.handler("x", reader)
		bind(h)
		expectRejection(t, s.rejected(t, h), "PermissionDenied", "bindings[0]", "may not patch widgets", s.ns)
		if fin := get(t, dyn, widgetGVR, s.ns, "w").GetFinalizers(); slices.Contains(fin, "tether.dev/x") {
			t.Fatalf("%s: a reader's handler holds the widget: finalizers %v", name, fin)
		}
	}

	h := s.handler("y", s.token(t, "writer"))
	h.OnDelete(widgets, nothing, sdk.Namespaces(s.ns), sdk.Finalizer(sdk.FinalizerStrict))
	runHandler(t, h, s.addr)
	waitObject(t, dyn, widgetGVR, s.ns, "w", "held by y", func(o *unstructured.Unstructured) bool {
		return slices.Contains(o.GetFinalizers(), "tether.dev/y")
	})
}

// TestHandlerNameIsGranted: an identity connects as a handler only when a
// Role grants it that name (connect on handlers.tether.dev), and holds with
// STRICT only when it also grants strict. Another identity with the same
// rights on the objects cannot join, replace or lock out the handler.
func TestHandlerNameIsGranted(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	s := startSecure(t, cp)
	objects := widgetRule("get", "list", "watch", "patch")
	s.grant(t, "owner", "owner", objects, handlerRule("victim", "connect"))
	s.grant(t, "intruder", "intruder", objects, handlerRule("intruder", "connect", "strict"))
	s.grant(t, "no-objects", "no-objects", handlerRule("empty", "connect"))
	owner, intruder := s.token(t, "owner"), s.token(t, "intruder")

	var j journal
	h := s.handler("victim", owner)
	h.OnCreate(widgets, j.record(nil), sdk.Namespaces(s.ns))
	runHandler(t, h, s.addr)
	create(t, dyn, widgetGVR, widget(s.ns, "w", nil))
	j.waitCount(t, sdk.Create, "w", 1)

	cases := []struct {
		name, handler, token string
		finalizer            sdk.FinalizerPolicy
		says                 []string
	}{
		{"another identity under the name", "victim", intruder, sdk.FinalizerDefault,
			[]string{"handler:", "system:serviceaccount:" + s.ns + ":intruder may not connect handlers.tether.dev victim"}},
		{"STRICT without the grant", "victim", owner, sdk.FinalizerStrict,
			[]string{"bindings[0]", "may not strict handlers.tether.dev victim"}},
		{"the name without the objects", "empty", s.token(t, "no-objects"), sdk.FinalizerDefault,
			[]string{"bindings[0]", "may not list widgets"}},
	}
	for _, c := range cases {
		h := s.handler(c.handler, c.token)
		h.OnDelete(widgets, nothing, sdk.Namespaces(s.ns), sdk.Finalizer(c.finalizer))
		expectRejection(t, s.rejected(t, h), "PermissionDenied", c.says...)
	}
	// The intruder's STRICT under its own name is fine.
	ih := s.handler("intruder", intruder)
	ih.OnDelete(widgets, nothing, sdk.Namespaces(s.ns), sdk.Finalizer(sdk.FinalizerStrict))
	runHandler(t, ih, s.addr)
	waitObject(t, dyn, widgetGVR, s.ns, "w", "held by intruder", func(o *unstructured.Unstructured) bool {
		return slices.Contains(o.GetFinalizers(), "tether.dev/intruder")
	})
}

// TestTakeoverNeedsItsGrant: a priority above 0 takes all of a handler's
// work from its other instances, so an identity may connect with one only
// when a Role grants it "takeover" on the handler's name besides "connect";
// without it the Hello is refused, naming the field and the verb.
func TestTakeoverNeedsItsGrant(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	s := startSecure(t, cp)
	objects := widgetRule("get", "list", "watch", "patch")
	s.grant(t, "in-cluster", "in-cluster", objects, handlerRule("shared", "connect"))
	s.grant(t, "developer", "developer", objects, handlerRule("shared", "connect", "takeover"))

	h := s.handler("shared", s.token(t, "in-cluster"), sdk.WithPriority(1))
	h.OnCreate(widgets, nothing, sdk.Namespaces(s.ns))
	expectRejection(t, s.rejected(t, h), "PermissionDenied",
		"priority:", "system:serviceaccount:"+s.ns+":in-cluster may not takeover handlers.tether.dev shared")

	var j journal
	dev := s.handler("shared", s.token(t, "developer"), sdk.WithPriority(1))
	dev.OnCreate(widgets, j.record(nil), sdk.Namespaces(s.ns))
	runHandler(t, dev, s.addr)
	create(t, dyn, widgetGVR, widget(s.ns, "w", nil))
	j.waitCount(t, sdk.Create, "w", 1)
}

// TestWithdrawnRightsEndTheSession: deleting the RoleBinding that lets a
// handler read its objects disconnects it at the next recheck, and it is
// then rejected; nothing more is delivered to it.
func TestWithdrawnRightsEndTheSession(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	s := startSecure(t, cp, func(o *broker.Options) { o.RecheckEvery = 500 * time.Millisecond })
	s.grant(t, "name", "h", handlerRule("h", "connect"))
	revoke := s.grant(t, "objects", "h", widgetRule("get", "list", "watch", "patch"))

	var j journal
	h := s.handler("h", s.token(t, "h"))
	h.OnCreate(widgets, j.record(nil), sdk.Namespaces(s.ns))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx, s.addr) }()
	create(t, dyn, widgetGVR, widget(s.ns, "before", nil))
	j.waitCount(t, sdk.Create, "before", 1)

	revoke()
	var rej *sdk.RejectedError
	if err := <-ran; !errors.As(err, &rej) {
		t.Fatalf("Run = %v after its RBAC was revoked, want a rejection", err)
	}
	expectRejection(t, rej, "PermissionDenied", "may not list widgets")
}

// TestTokensForAnotherAudienceAreRefused: with --token-audience, a token
// the API server issued for itself does not pass; one requested for the
// broker's audience does.
func TestTokensForAnotherAudienceAreRefused(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	s := startSecure(t, cp, func(o *broker.Options) { o.TokenAudiences = []string{"tether.dev/broker"} })
	s.grant(t, "h", "h", widgetRule("get", "list", "watch", "patch"), handlerRule("h", "connect"))

	h := s.handler("h", s.token(t, "h"))
	h.OnCreate(widgets, nothing, sdk.Namespaces(s.ns))
	expectRejection(t, s.rejected(t, h), "Unauthenticated", "invalid token", "tether.dev/broker")

	var j journal
	h = s.handler("h", s.token(t, "h", "tether.dev/broker"))
	h.OnCreate(widgets, j.record(nil), sdk.Namespaces(s.ns))
	runHandler(t, h, s.addr)
	create(t, dyn, widgetGVR, widget(s.ns, "w", nil))
	j.waitCount(t, sdk.Create, "w", 1)
}

// grantCluster gives the ServiceAccount sa of the test's namespace the
// rules cluster-wide, until the test ends.
func (s *secure) grantCluster(t *testing.T, name, sa string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	rbac := s.cp.Client().RbacV1()
	name = s.ns + "-" + name
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: s.ns}},
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// invalidPatchEvent waits for the Event saying that the API server refused
// handler's patch of the widget, and returns its message.
func invalidPatchEvent(t *testing.T, cp *controlplane.ControlPlane, ns, name, handler string) string {
	t.Helper()
	var msg string
	eventually(t, "an InvalidPatch Event for "+handler, func() bool {
		for _, e := range events(t, cp, ns, name) {
			if e.Reason == "InvalidPatch" && strings.Contains(e.Message, `handler "`+handler+`"`) {
				msg = e.Message
				return true
			}
		}
		return false
	})
	return msg
}

// TestHandlersStatusPatchNeedsStatusRBAC: the broker writes a handler's
// status patch as the handler, so it needs patch on widgets/status, as it
// would writing it itself; patch on widgets is not enough.
func TestHandlersStatusPatchNeedsStatusRBAC(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	s := startSecure(t, cp)
	s.grant(t, "h", "h", widgetRule("get", "list", "watch", "patch"), handlerRule("h", "connect"))
	h := s.handler("h", s.token(t, "h"))
	h.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
		ev.SetLabel("seen", "yes")
		ev.PatchStatus(map[string]any{"phase": "Ready"})
		return nil
	}, sdk.Namespaces(s.ns))
	runHandler(t, h, s.addr)
	create(t, dyn, widgetGVR, widget(s.ns, "w", nil))

	msg := invalidPatchEvent(t, cp, s.ns, "w", "h")
	if !strings.Contains(msg, "system:serviceaccount:"+s.ns+":h") || !strings.Contains(msg, "widgets/status") {
		t.Errorf("the Event %q does not say that the handler may not patch widgets/status", msg)
	}
	w := get(t, dyn, widgetGVR, s.ns, "w")
	if phase, found, _ := unstructured.NestedString(w.Object, "status", "phase"); found {
		t.Errorf("status.phase = %q: the broker wrote a status the handler may not", phase)
	}
	if w.GetLabels()["seen"] != "yes" {
		t.Errorf("labels %v: the patch the handler may make did not land", w.GetLabels())
	}
}

// TestHandlersPatchFacesOtherHandlersWebhooks: a handler's patch, written by
// the broker, is reviewed by another handler's webhook as if the handler
// made it; the broker's own writes are exempt from webhooks, its handlers'
// are not.
func TestHandlersPatchFacesOtherHandlersWebhooks(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	s := startSecure(t, cp, func(o *broker.Options) { o.Admission = broker.Admission{Listen: "127.0.0.1:0"} })
	objects := widgetRule("get", "list", "watch", "patch")
	// The widgets live apart from the broker's namespace, which no webhook
	// is sent.
	ns := cp.Namespace(t)
	s.grant(t, "guard", "guard", handlerRule("guard", "connect"))
	s.grantIn(t, ns, "guard", "guard", objects)
	s.grantCluster(t, "guard", "guard", rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"},
		Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"create"}})
	s.grant(t, "writer", "writer", handlerRule("writer", "connect"))
	s.grantIn(t, ns, "writer", "writer", objects)

	guard := s.handler("guard", s.token(t, "guard"))
	guard.OnValidate(widgets, func(_ context.Context, r *sdk.Review) error {
		if r.Object.GetLabels()["forbidden"] != "" {
			return sdk.Deny("the label forbidden is forbidden")
		}
		return nil
	}, sdk.Namespaces(ns), sdk.Failure(sdk.FailClosed))
	runHandler(t, guard, s.addr)
	// The webhooks let the broker's own user through, and the test's
	// client is that user: probe as another.
	tester := asTester(cp)
	probes := 0
	eventually(t, "the guard's webhook to refuse a forbidden label", func() bool {
		probes++
		w := widget(ns, fmt.Sprint("probe-", probes), nil)
		w.SetLabels(map[string]string{"forbidden": "yes"})
		_, err := tester.Resource(widgetGVR).Namespace(ns).Create(context.Background(), w, metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "the label forbidden is forbidden")
	})

	writer := s.handler("writer", s.token(t, "writer"))
	writer.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
		ev.SetLabel("forbidden", "yes")
		return nil
	}, sdk.Namespaces(ns))
	runHandler(t, writer, s.addr)
	create(t, dyn, widgetGVR, widget(ns, "w", nil))

	msg := invalidPatchEvent(t, cp, ns, "w", "writer")
	if !strings.Contains(msg, "the label forbidden is forbidden") {
		t.Errorf("the Event %q does not carry the webhook's refusal", msg)
	}
	if l := get(t, dyn, widgetGVR, ns, "w").GetLabels(); l["forbidden"] != "" {
		t.Errorf("labels %v: the writer's patch got past the guard's webhook", l)
	}
}

// answered is how many requests on resource (tokenreviews,
// subjectaccessreviews) the API server has answered, from its own metrics.
func answered(t *testing.T, cp *controlplane.ControlPlane, resource string) float64 {
	t.Helper()
	data, err := cp.Client().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			n += v
		}
	}
	return n
}

// TestBogusTokensAreReviewedOnce: streams that present the same made-up
// token again and again cost one TokenReview, not one each, so that they
// cannot spend the API server's (and the broker's) request budget.
func TestBogusTokensAreReviewedOnce(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	s := startSecure(t, cp)
	before := answered(t, cp, "tokenreviews")
	for range 50 {
		h := s.handler("h", "made-up-token")
		h.OnCreate(widgets, nothing, sdk.Namespaces(s.ns))
		expectRejection(t, s.rejected(t, h), "Unauthenticated", "invalid token")
	}
	if n := answered(t, cp, "tokenreviews") - before; n > 2 {
		t.Errorf("50 streams with one bogus token cost %v TokenReviews, want 1", n)
	}
}
