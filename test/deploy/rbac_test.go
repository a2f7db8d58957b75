package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/test/controlplane"
)

// access is one question to SubjectAccessReview and the answer the
// manifests must give.
type access struct {
	verb, group, resource, subresource, namespace, name string
	allowed                                             bool
}

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	where := "cluster-wide"
	if a.namespace != "" {
		where = "in " + a.namespace
	}
	if a.name != "" {
		where += " (" + a.name + ")"
	}
	return a.verb + " " + r + " " + where
}

func allow(verb, group, resource, namespace string) access {
	return access{verb: verb, group: group, resource: resource, namespace: namespace, allowed: true}
}

func deny(verb, group, resource, namespace string) access {
	return access{verb: verb, group: group, resource: resource, namespace: namespace}
}

func (a access) sub(s string) access { a.subresource = s; return a }

func (a access) named(n string) access { a.name = n; return a }

// serviceAccountUser is the user and groups the API server gives a token of
// the ServiceAccount namespace/name.
func serviceAccountUser(namespace, name string) (string, []string) {
	return "system:serviceaccount:" + namespace + ":" + name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// checkAccess asks SubjectAccessReview every question in table for the
// ServiceAccount namespace/name.
func checkAccess(t *testing.T, kube kubernetes.Interface, namespace, name string, table []access) {
	t.Helper()
	user, groups := serviceAccountUser(namespace, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The API server's authorizer sees a new grant through its own watch of
	// RBAC, a moment after the write: ask again until the answers are the
	// table's or the deadline passes, and report the last answers.
	var wrong []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		wrong = wrong[:0]
		for _, a := range table {
			sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user, Groups: groups,
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
						Namespace: a.namespace, Name: a.name,
					},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				return false, fmt.Errorf("SubjectAccessReview %s: %w", a, err)
			}
			if sar.Status.Allowed != a.allowed {
				wrong = append(wrong, fmt.Sprintf("%s may %s: allowed = %v, want %v (%s)", name, a, sar.Status.Allowed, a.allowed, sar.Status.Reason))
			}
		}
		return len(wrong) == 0, nil
	})
	if err != nil && len(wrong) == 0 {
		t.Fatal(err)
	}
	for _, w := range wrong {
		t.Error(w)
	}
}

// TestBrokerRBACIsEnough asks the API server what the ServiceAccount
// tether-broker may do after deploy/ is applied, with no handler's grant
// aggregated (this control plane runs no controller manager, so the
// ClusterRole tether-broker stays empty, as with deploy/broker alone):
// everything the broker needs for itself, nothing on what handlers bind,
// and not what it must never do.
func TestBrokerRBACIsEnough(t *testing.T) {
	cp, _ := applyManifests(t)
	const other = "some-namespace"
	table := []access{
		// Nothing a handler may bind, until a handler's install grants it
		// (TestBrokerRightsFollowTheHandlers): the ClusterRole tether-broker
		// aggregates those grants and holds none of its own.
		deny("list", "test.tether.dev", "widgets", ""),
		deny("patch", "test.tether.dev", "widgets", other),
		deny("get", "", "secrets", "kube-system"),
		deny("list", "", "secrets", ""),
		deny("patch", "", "pods", "kube-system").sub("ephemeralcontainers"),
		deny("get", "", "nodes", "").sub("proxy"),
		deny("patch", "admissionregistration.k8s.io", "validatingadmissionpolicybindings", ""),
		deny("patch", "admissionregistration.k8s.io", "validatingadmissionpolicies", ""),
		deny("patch", "apps", "deployments", "kube-system"),
		deny("patch", "apps", "deployments", other).sub("status"),
		deny("patch", "", "configmaps", "kube-system"),
		// Its own Namespace, read to own its uninstall grant; no other.
		allow("get", "", "namespaces", "").named(ns),
		deny("get", "", "namespaces", "").named("kube-system"),
		// The namespaces that ask for its CA bundle, found by their label.
		allow("list", "", "namespaces", ""),
		allow("watch", "", "namespaces", ""),
		deny("patch", "", "namespaces", "").named(exampleNS),
		// Events.
		allow("create", "", "events", other),
		allow("patch", "", "events", other),
		allow("create", "events.k8s.io", "events", other),
		allow("patch", "events.k8s.io", "events", other),
		// Presence and leader election.
		allow("get", "coordination.k8s.io", "leases", ns),
		allow("list", "coordination.k8s.io", "leases", ns),
		allow("watch", "coordination.k8s.io", "leases", ns),
		allow("create", "coordination.k8s.io", "leases", ns),
		allow("update", "coordination.k8s.io", "leases", ns),
		// Uninstall detection.
		allow("get", "apps", "deployments", ns),
		allow("list", "apps", "deployments", ns),
		allow("watch", "apps", "deployments", ns),
		// Handler authentication and authorization.
		allow("create", "authentication.k8s.io", "tokenreviews", ""),
		allow("create", "authorization.k8s.io", "subjectaccessreviews", ""),
		// Its own user name, which its webhooks let through unreviewed: every
		// authenticated user may ask (system:basic-user), no rule needed.
		allow("create", "authentication.k8s.io", "selfsubjectreviews", ""),
		// Admission webhooks.
		allow("create", "admissionregistration.k8s.io", "validatingwebhookconfigurations", ""),
		allow("update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", ""),
		allow("delete", "admissionregistration.k8s.io", "validatingwebhookconfigurations", ""),
		allow("create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", ""),
		allow("update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", ""),
		allow("delete", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", ""),
		allow("watch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", ""),
		// The gRPC and webhook CAs in its own namespace, and the gRPC CA
		// bundle it publishes there.
		allow("get", "", "secrets", ns),
		allow("create", "", "secrets", ns),
		allow("update", "", "secrets", ns),
		allow("get", "", "configmaps", ns),
		allow("create", "", "configmaps", ns),
		allow("update", "", "configmaps", ns),
		deny("delete", "", "configmaps", ns),
		deny("create", "", "configmaps", other),
		deny("update", "", "configmaps", other),
		// The CA bundle in the example handler's namespace, which asks for
		// it and grants that ConfigMap alone.
		allow("get", "", "configmaps", exampleNS).named("tether-broker-ca"),
		allow("update", "", "configmaps", exampleNS).named("tether-broker-ca"),
		deny("update", "", "configmaps", exampleNS).named("other"),
		deny("create", "", "configmaps", exampleNS),
		deny("delete", "", "configmaps", exampleNS).named("tether-broker-ca"),
		deny("list", "", "configmaps", exampleNS),

		// Whether an absent STRICT handler's ServiceAccount still exists
		// (broker/orphans): read by name, never listed or written.
		allow("get", "", "serviceaccounts", other),
		deny("list", "", "serviceaccounts", ""),
		deny("watch", "", "serviceaccounts", other),
		deny("patch", "", "serviceaccounts", other),
		deny("update", "", "serviceaccounts", other),
		// Handlers' patches are written as the handler: the ServiceAccounts
		// of installed handlers only, each granted by its install (the
		// example handler's Role); no other, kube-system's controllers
		// included, and never a user, group, uid or extra.
		allow("impersonate", "", "serviceaccounts", exampleNS).named(handlerName),
		deny("impersonate", "", "serviceaccounts", ns).named(handlerName),
		deny("impersonate", "", "serviceaccounts", "kube-system").named("clusterrole-aggregation-controller"),
		deny("impersonate", "", "serviceaccounts", "kube-system"),
		deny("impersonate", "", "serviceaccounts", other),
		deny("impersonate", "", "serviceaccounts", ns).named(brokerName),
		deny("impersonate", "", "users", ""),
		deny("impersonate", "", "groups", ""),
		deny("impersonate", "authentication.k8s.io", "uids", ""),
		deny("impersonate", "authentication.k8s.io", "userextras", "").sub("scopes"),

		// Least privilege: the broker only ever patches objects.
		deny("delete", "", "secrets", other),
		deny("delete", "", "secrets", ns),
		deny("deletecollection", "", "secrets", other),
		deny("create", "", "secrets", other),
		deny("update", "", "secrets", other),
		deny("create", "", "pods", other),
		deny("create", "", "pods", ns),
		deny("create", "", "pods", other).sub("exec"),
		deny("create", "", "pods", other).sub("eviction"),
		deny("create", "", "serviceaccounts", other).sub("token"),
		deny("create", "test.tether.dev", "widgets", other),
		deny("update", "test.tether.dev", "widgets", other),
		deny("delete", "test.tether.dev", "widgets", other),
		deny("update", "test.tether.dev", "widgets", other).sub("status"),
		deny("create", "apps", "deployments", ns),
		deny("delete", "apps", "deployments", ns),
		deny("update", "apps", "deployments", ns),
		// Leases only in its own namespace, and never deleted.
		deny("create", "coordination.k8s.io", "leases", other),
		deny("update", "coordination.k8s.io", "leases", other),
		deny("delete", "coordination.k8s.io", "leases", ns),
		// Namespaces exist in the cluster; the broker does not make them.
		deny("create", "", "namespaces", ""),
		deny("delete", "", "namespaces", ""),
		deny("delete", "", "events", other),
		deny("update", "", "events", other),
		// No way to grant itself more. Its uninstall grant (a copy of its
		// own ClusterRoles' rules) it may write, and the API server's
		// escalation check lets it copy only what it holds; the policy
		// tether-broker-grant keeps it to that one name and to itself
		// (TestBrokerWritesOnlyItsOwnGrant).
		allow("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
		deny("create", "rbac.authorization.k8s.io", "rolebindings", other),
		deny("bind", "rbac.authorization.k8s.io", "clusterroles", ""),
		deny("escalate", "rbac.authorization.k8s.io", "clusterroles", ""),
		deny("create", "certificates.k8s.io", "certificatesigningrequests", ""),
	}
	checkAccess(t, cp.Client(), ns, brokerName, table)

	// kubectl auth can-i with impersonation gives the same answers.
	as := "--as=system:serviceaccount:" + ns + ":" + brokerName
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "leases.coordination.k8s.io", "-n", ns}, "yes"},
		{[]string{"list", "secrets", "--all-namespaces"}, "no"},
		{[]string{"get", "secrets", "-n", "kube-system"}, "no"},
		{[]string{"patch", "pods", "--subresource=ephemeralcontainers", "-n", "kube-system"}, "no"},
		{[]string{"get", "nodes", "--subresource=proxy"}, "no"},
		{[]string{"patch", "validatingadmissionpolicybindings.admissionregistration.k8s.io"}, "no"},
		{[]string{"patch", "deployments.apps", "-n", "kube-system"}, "no"},
		{[]string{"patch", "configmaps", "-n", "kube-system"}, "no"},
		{[]string{"delete", "secrets", "-n", "default"}, "no"},
		{[]string{"create", "pods", "-n", "default"}, "no"},
		{[]string{"impersonate", "serviceaccounts/clusterrole-aggregation-controller", "-n", "kube-system"}, "no"},
		{[]string{"impersonate", "serviceaccounts/" + handlerName, "-n", exampleNS}, "yes"},
		{[]string{"list", "namespaces"}, "yes"},
		{[]string{"update", "configmaps/tether-broker-ca", "-n", exampleNS}, "yes"},
		{[]string{"update", "configmaps/other", "-n", exampleNS}, "no"},
	} {
		res := runKubectl(cp, repoRoot(t), append([]string{"auth", "can-i", as}, tc.args...)...)
		if got := strings.TrimSpace(res.stdout); got != tc.want {
			t.Errorf("kubectl auth can-i %s: %q, want %q\n%s", strings.Join(tc.args, " "), got, tc.want, res)
		}
	}
}

// exampleObjectsRole is the ClusterRole a namespace binds to opt in to the
// example handler.
const exampleObjectsRole = "tether-example-handler-objects"

// TestExampleHandlerRBAC checks the example handler's ServiceAccount: what
// its replicator, TTL reaper and TTL webhook need, and no more: Secrets and
// ConfigMaps only in a namespace that opted in (TestExampleHandlerOptIn).
func TestExampleHandlerRBAC(t *testing.T) {
	cp, _ := applyManifests(t)
	const other = "some-namespace"
	table := []access{
		allow("get", "", "namespaces", ""),
		allow("list", "", "namespaces", ""),
		allow("watch", "", "namespaces", ""),
		// The broker writes the webhook configuration of a validate binding
		// only when the handler could create one itself (broker/auth).
		allow("create", "admissionregistration.k8s.io", "validatingwebhookconfigurations", ""),
	}
	for _, r := range []string{"secrets", "configmaps"} {
		for _, verb := range []string{"list", "watch"} {
			table = append(table, deny(verb, "", r, ""))
		}
		for _, where := range []string{other, "kube-system", ns, exampleNS} {
			for _, verb := range []string{"get", "list", "create", "update", "patch", "delete"} {
				table = append(table, deny(verb, "", r, where))
			}
		}
	}
	table = append(table,
		deny("create", "", "namespaces", ""),
		deny("delete", "", "namespaces", ""),
		deny("create", "", "pods", other),
		deny("list", "test.tether.dev", "widgets", ""),
		deny("list", "apps", "deployments", ""),
		deny("create", "", "events", other),
		deny("create", "coordination.k8s.io", "leases", ns),
		deny("create", "authentication.k8s.io", "tokenreviews", ""),
		deny("create", "", "serviceaccounts", other).sub("token"),
		// No way to opt a namespace in by itself.
		deny("create", "rbac.authorization.k8s.io", "rolebindings", other),
		deny("bind", "rbac.authorization.k8s.io", "clusterroles", "").named(exampleObjectsRole),
		// It binds no mutate binding, and the broker, not the handler,
		// keeps the configuration in sync and removes it.
		deny("create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", ""),
		deny("update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", ""),
		deny("patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", ""),
		deny("delete", "admissionregistration.k8s.io", "validatingwebhookconfigurations", ""),
		deny("list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", ""),
		// Its handler name is granted in the broker's namespace (broker/auth
		// Rights), that name only, and not STRICT.
		allow("connect", "tether.dev", "handlers", ns).named("example"),
		deny("connect", "tether.dev", "handlers", ns).named("other"),
		deny("connect", "tether.dev", "handlers", other).named("example"),
		deny("strict", "tether.dev", "handlers", ns).named("example"),
	)
	checkAccess(t, cp.Client(), exampleNS, handlerName, table)
}

// TestBrokerServiceAccountDoesItsJob authenticates with a real token of the
// ServiceAccount tether-broker and does what the broker does, and what it
// must not do, with the example handler's grant and one for widgets
// aggregated (aggregateForBroker).
func TestBrokerServiceAccountDoesItsJob(t *testing.T) {
	cp, _ := applyManifests(t)
	admin := cp.EnsureWidgetCRD(t)
	grantBrokerWidgets(t, cp)
	aggregateForBroker(t, cp)
	objNS := cp.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cfg := asBroker(ctx, t, cp)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: err = %v, want Forbidden", what, err)
		}
	}
	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	// The token is the broker's.
	tr, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: cfg.BearerToken},
	}, metav1.CreateOptions{})
	ok("TokenReview", err)
	if user, _ := serviceAccountUser(ns, brokerName); err == nil && (!tr.Status.Authenticated || tr.Status.User.Username != user) {
		t.Fatalf("TokenReview of the broker's token: %+v, want %s", tr.Status, user)
	}
	self, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	ok("SelfSubjectReview (the user its webhooks let through)", err)
	if user, _ := serviceAccountUser(ns, brokerName); err == nil && self.Status.UserInfo.Username != user {
		t.Errorf("SelfSubjectReview: the broker is %q, want %s", self.Status.UserInfo.Username, user)
	}
	_, err = kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + exampleNS + ":" + handlerName,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"},
		},
	}, metav1.CreateOptions{})
	ok("SubjectAccessReview for a handler", err)

	// A widget and a Secret made by someone else.
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": objNS},
		"spec":     map[string]any{"size": int64(1)},
	}}
	w, err = admin.Resource(controlplane.WidgetGVR).Namespace(objNS).Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := cp.Client().CoreV1().Secrets(objNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: objNS},
		StringData: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// List and watch cluster-wide.
	widgets := dyn.Resource(controlplane.WidgetGVR)
	list, err := widgets.List(ctx, metav1.ListOptions{})
	ok("list widgets cluster-wide", err)
	if err == nil && len(list.Items) == 0 {
		t.Error("the broker lists no widgets")
	}
	wi, err := widgets.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	ok("watch widgets cluster-wide", err)
	if err == nil {
		wi.Stop()
	}
	_, err = kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	ok("list secrets cluster-wide", err)
	si, err := kube.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{})
	ok("watch secrets cluster-wide", err)
	if err == nil {
		si.Stop()
	}

	// A hold and progress, with a JSON patch guarded by the resourceVersion.
	// Not the status subresource: a handler's status patch is written as
	// the handler, and no handler's grant gives the broker widgets/status.
	hold, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": w.GetResourceVersion()},
		{"op": "add", "path": "/metadata/finalizers", "value": []string{"tether.dev/test"}},
		{"op": "add", "path": "/metadata/annotations", "value": map[string]string{"test.tether.dev/last-handled": "{}"}},
	})
	wr := widgets.Namespace(objNS)
	patched, err := wr.Patch(ctx, "w", types.JSONPatchType, hold, metav1.PatchOptions{FieldManager: "tether-broker"})
	ok("add a finalizer to a widget", err)
	if err == nil && (len(patched.GetFinalizers()) != 1 || patched.GetFinalizers()[0] != "tether.dev/test") {
		t.Errorf("finalizers after the patch: %v", patched.GetFinalizers())
	}
	_, err = wr.Patch(ctx, "w", types.MergePatchType, []byte(`{"status":{"phase":"Ready"}}`), metav1.PatchOptions{}, "status")
	forbidden("patch a widget's status as the broker", err)
	release, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": []string{"tether.dev/test"}},
		{"op": "remove", "path": "/metadata/finalizers"},
	})
	_, err = wr.Patch(ctx, "w", types.JSONPatchType, release, metav1.PatchOptions{})
	ok("release the finalizer", err)
	_, err = kube.CoreV1().Secrets(objNS).Patch(ctx, "s", types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.tether.dev/last-handled":"{}"}}}`), metav1.PatchOptions{})
	ok("patch a Secret", err)

	// A handler's patch, written as the handler: the example handler's
	// ServiceAccount may patch Secrets, not widgets; as it, the broker may
	// do exactly that. It may not act as a user or a group.
	as := func(imp rest.ImpersonationConfig) dynamic.Interface {
		c := rest.CopyConfig(cfg)
		c.Impersonate = imp
		return dynamic.NewForConfigOrDie(c)
	}
	optIn(t, cp, objNS)
	handler := as(rest.ImpersonationConfig{UserName: "system:serviceaccount:" + exampleNS + ":" + handlerName})
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	_, err = handler.Resource(secrets).Namespace(objNS).Patch(ctx, "s", types.MergePatchType, []byte(`{"metadata":{"labels":{"by":"handler"}}}`), metav1.PatchOptions{})
	ok("patch a Secret as the handler's ServiceAccount", err)
	_, err = handler.Resource(controlplane.WidgetGVR).Namespace(objNS).Patch(ctx, "w", types.MergePatchType, []byte(`{"metadata":{"labels":{"by":"handler"}}}`), metav1.PatchOptions{})
	forbidden("patch a widget as the handler's ServiceAccount, which may not", err)
	_, err = as(rest.ImpersonationConfig{UserName: "alice"}).Resource(secrets).Namespace(objNS).Get(ctx, "s", metav1.GetOptions{})
	forbidden("act as a user", err)
	// The aggregation controller may read every ClusterRole (and update
	// them); as it, the broker may not.
	_, err = as(rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:clusterrole-aggregation-controller"}).
		Resource(rbacv1.SchemeGroupVersion.WithResource("clusterroles")).Get(ctx, "cluster-admin", metav1.GetOptions{})
	forbidden("act as a ServiceAccount of kube-system", err)
	_, err = as(rest.ImpersonationConfig{UserName: "system:serviceaccount:" + exampleNS + ":" + handlerName, Groups: []string{"system:masters"}}).
		Resource(secrets).Namespace(objNS).Get(ctx, "s", metav1.GetOptions{})
	forbidden("act as system:masters", err)

	// Events about the widget, in its namespace, both APIs.
	ev, err := kube.CoreV1().Events(objNS).Create(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "w.", Namespace: objNS},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "test.tether.dev/v1", Kind: "Widget", Namespace: objNS, Name: "w", UID: w.GetUID(),
		},
		Reason: "HandlerFailed", Message: "test", Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "tether-broker"}, Count: 1,
	}, metav1.CreateOptions{})
	ok("create an Event", err)
	if err == nil {
		_, err = kube.CoreV1().Events(objNS).Patch(ctx, ev.Name, types.StrategicMergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{})
		ok("patch an Event", err)
	}
	now := metav1.NewMicroTime(time.Now())
	_, err = kube.EventsV1().Events(objNS).Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "w-", Namespace: objNS},
		EventTime:  now, ReportingController: "tether.dev/broker", ReportingInstance: "test",
		Action: "Release", Reason: "Released", Type: corev1.EventTypeNormal, Note: "test",
		Regarding: corev1.ObjectReference{APIVersion: "test.tether.dev/v1", Kind: "Widget", Namespace: objNS, Name: "w", UID: w.GetUID()},
	}, metav1.CreateOptions{})
	ok("create an events.k8s.io Event", err)

	// Presence and leader Leases in tether-system, not elsewhere.
	leases := kube.CoordinationV1().Leases(ns)
	for _, name := range []string{"tether-broker-leader", "handler-test-presence"} {
		holder := "test"
		l, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"tether.dev/handler": "test"}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}, metav1.CreateOptions{})
		ok("create the Lease "+name, err)
		if err != nil {
			continue
		}
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		ok("update the Lease "+name, err)
		forbidden("delete the Lease "+name, leases.Delete(ctx, name, metav1.DeleteOptions{}))
	}
	_, err = leases.List(ctx, metav1.ListOptions{LabelSelector: "tether.dev/handler"})
	ok("list presence Leases", err)
	_, err = kube.CoordinationV1().Leases(objNS).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: objNS},
	}, metav1.CreateOptions{})
	forbidden("create a Lease outside tether-system", err)

	// Its own Deployment, watched by name as the uninstall watch does.
	byName := metav1.ListOptions{FieldSelector: "metadata.name=" + brokerName}
	deps, err := kube.AppsV1().Deployments(ns).List(ctx, byName)
	ok("list its own Deployment", err)
	if err == nil && len(deps.Items) != 1 {
		t.Errorf("the broker sees %d Deployments named %s, want 1", len(deps.Items), brokerName)
	}
	di, err := kube.AppsV1().Deployments(ns).Watch(ctx, byName)
	ok("watch its own Deployment", err)
	if err == nil {
		di.Stop()
	}

	// Webhook configurations, cluster-scoped.
	vwc, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tether-deploy-test"},
	}, metav1.CreateOptions{})
	ok("create a ValidatingWebhookConfiguration", err)
	if err == nil {
		vwc.Labels = map[string]string{"tether.dev/handler": "test"}
		_, err = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
		ok("update a ValidatingWebhookConfiguration", err)
		ok("delete a ValidatingWebhookConfiguration",
			kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, vwc.Name, metav1.DeleteOptions{}))
	}
	_, err = kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tether-deploy-test"},
	}, metav1.CreateOptions{})
	ok("create a MutatingWebhookConfiguration", err)
	if err == nil {
		ok("delete a MutatingWebhookConfiguration",
			kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "tether-deploy-test", metav1.DeleteOptions{}))
	}

	// The webhook CA Secret in tether-system: create, read, update; no delete.
	ca, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tether-deploy-test-webhook-ca", Namespace: ns},
		StringData: map[string]string{"ca.crt": "test"},
	}, metav1.CreateOptions{})
	ok("create the webhook CA Secret", err)
	if err == nil {
		ca.StringData = map[string]string{"ca.crt": "rotated"}
		_, err = kube.CoreV1().Secrets(ns).Update(ctx, ca, metav1.UpdateOptions{})
		ok("update the webhook CA Secret", err)
		forbidden("delete the webhook CA Secret", kube.CoreV1().Secrets(ns).Delete(ctx, ca.Name, metav1.DeleteOptions{}))
		_ = cp.Client().CoreV1().Secrets(ns).Delete(ctx, ca.Name, metav1.DeleteOptions{})
	}

	// What it must not do.
	forbidden("delete a Secret", kube.CoreV1().Secrets(objNS).Delete(ctx, secret.Name, metav1.DeleteOptions{}))
	_, err = kube.CoreV1().Secrets(objNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: objNS}}, metav1.CreateOptions{})
	forbidden("create a Secret outside tether-system", err)
	_, err = kube.CoreV1().Pods(objNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: objNS},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	forbidden("create a Pod", err)
	cur, err := wr.Get(ctx, "w", metav1.GetOptions{})
	ok("get a widget", err)
	if err == nil {
		_, err = wr.Update(ctx, cur, metav1.UpdateOptions{})
		forbidden("update (PUT) a widget", err)
	}
	forbidden("delete a widget", wr.Delete(ctx, "w", metav1.DeleteOptions{}))
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tether-made-this"}}, metav1.CreateOptions{})
	forbidden("create a namespace", err)
	_, err = kube.CoreV1().ServiceAccounts(objNS).CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	forbidden("mint a token for another ServiceAccount", err)
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, rbacBindingToAdmin(), metav1.CreateOptions{})
	forbidden("bind itself to cluster-admin", err)
}

func rbacBindingToAdmin() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tether-broker-escalates"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: brokerName, Namespace: ns}},
	}
}

// TestBrokerWritesOnlyItsOwnGrant: RBAC lets the broker create
// ClusterRoles and ClusterRoleBindings, for its uninstall grant; the policy
// tether-broker-grant refuses any other name, a binding of anyone else, and
// the deletion of another ClusterRole.
func TestBrokerWritesOnlyItsOwnGrant(t *testing.T) {
	cp, _ := applyManifests(t)
	cfg := cp.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + brokerName,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	asBroker := kubernetes.NewForConfigOrDie(cfg)
	rbac := asBroker.RbacV1()
	ctx := context.Background()
	grant := "tether-broker-uninstall-" + ns
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}}}
	bindingOf := func(name, sa, role string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "tether-broker-grant") {
			t.Errorf("%s: got %v, want the policy's refusal", what, err)
		}
	}

	// The policy takes effect once the API server has loaded it.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(30 * time.Second); ; <-tick.C {
		_, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "not-the-grant"}, Rules: rules}, metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), "tether-broker-grant") {
			break
		}
		if err == nil {
			_ = cp.Client().RbacV1().ClusterRoles().Delete(ctx, "not-the-grant", metav1.DeleteOptions{})
		}
		if time.Now().After(deadline) {
			t.Fatalf("a ClusterRole of another name: got %v, want the policy's refusal", err)
		}
	}
	_, err := rbac.ClusterRoleBindings().Create(ctx, bindingOf("someone-else", "someone-else", brokerName), metav1.CreateOptions{})
	refused("a binding of another ServiceAccount to the broker's ClusterRole", err)
	refused("deleting another ClusterRole", rbac.ClusterRoles().Delete(ctx, "tether-example-handler", metav1.DeleteOptions{}))

	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: grant}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the broker's own grant: %v", err)
	}
	_, err = rbac.ClusterRoleBindings().Create(ctx, bindingOf(grant, "someone-else", grant), metav1.CreateOptions{})
	refused("the grant's name binding another ServiceAccount", err)
	if _, err := rbac.ClusterRoleBindings().Create(ctx, bindingOf(grant, brokerName, grant), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the broker's own grant binding: %v", err)
	}
	if err := rbac.ClusterRoles().Delete(ctx, grant, metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting its own grant: %v", err)
	}
	_ = cp.Client().RbacV1().ClusterRoleBindings().Delete(ctx, grant, metav1.DeleteOptions{})
}

// asBroker is a client configuration with the broker's ServiceAccount's
// token and nothing of the admin's, so that the API server judges what it
// asks as it judges the broker.
func asBroker(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) *rest.Config {
	t.Helper()
	token, err := cp.ServiceAccountToken(ctx, ns, brokerName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cp.RESTConfig()
	cfg.BearerToken, cfg.BearerTokenFile = token, ""
	cfg.Username, cfg.Password = "", ""
	cfg.Impersonate = rest.ImpersonationConfig{}
	return cfg
}
