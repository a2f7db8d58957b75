package lifecycle

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/guard"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// brokerIdentity makes the ServiceAccount sa of ns an identity with the
// rights a broker has for itself (deploy/broker's tether-broker-base and
// its Role, as far as this broker uses them: its uninstall guard and grant
// included), and none on what handlers bind nor on who they are (a
// handler's install grants impersonate on its ServiceAccount: actAsGrant),
// and returns a client configuration that authenticates as it.
func brokerIdentity(t *testing.T, cp *controlplane.ControlPlane, ns, sa string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	token, err := cp.ServiceAccountToken(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	rbac := cp.Client().RbacV1()
	base := "broker-base-" + ns
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: base}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{ns}, Verbs: []string{"get"}},
		// The uninstall grant, removed when the test ends (no garbage
		// collector here removes it with the namespace).
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterrolebindings"}, Verbs: []string{"get", "list", "create"}},
	}}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoles().Delete(context.Background(), base, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(context.Background(), guard.GrantName(ns), metav1.DeleteOptions{})
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), guard.GrantName(ns), metav1.DeleteOptions{})
	})
	bindClusterRole(t, cp, base, ns, sa)
	own := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "broker", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		// The key that signs presence Leases (and the CAs), as deploy/broker's Role.
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "update"}},
		// The uninstall guard.
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"rolebindings"}, Verbs: []string{"get", "list", "patch"}},
	}}
	if _, err := rbac.Roles(ns).Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "broker", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "broker"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}
	if _, err := rbac.RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := cp.RESTConfig()
	cfg.BearerToken, cfg.BearerTokenFile, cfg.Username, cfg.Password = token, "", "", ""
	cfg.CertFile, cfg.KeyFile, cfg.CertData, cfg.KeyData = "", "", nil, nil
	cfg.Impersonate = rest.ImpersonationConfig{}
	return cfg
}

// actAsGrant is what a handler's install grants the broker sa of s.ns: a
// Role letting it impersonate the handler's ServiceAccount handlerSA of
// s.ns, by name.
func actAsGrant(t *testing.T, s *secure, brokerSA, handlerSA string) {
	t.Helper()
	s.grant(t, "broker-as-"+handlerSA, brokerSA, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts"},
		ResourceNames: []string{handlerSA}, Verbs: []string{"impersonate"}})
}

// bindClusterRole binds the ClusterRole role to the ServiceAccount ns/sa
// until the test ends.
func bindClusterRole(t *testing.T, cp *controlplane.ControlPlane, role, ns, sa string) {
	t.Helper()
	rbac := cp.Client().RbacV1()
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}
	if _, err := rbac.ClusterRoleBindings().Create(context.Background(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{}) })
}

// grantBrokerWidgets gives the broker's identity ("broker" in ns) what a
// widgets handler's install grants it: a ClusterRole with the aggregation
// label, bound here directly (this control plane runs no controller
// manager to aggregate it).
func grantBrokerWidgets(t *testing.T, cp *controlplane.ControlPlane, ns string) {
	t.Helper()
	grant := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "broker-widgets-" + ns, Labels: map[string]string{auth.AggregationLabel: "true"}},
		Rules:      []rbacv1.PolicyRule{widgetRule("get", "list", "watch", "patch")},
	}
	if _, err := cp.Client().RbacV1().ClusterRoles().Create(context.Background(), grant, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Client().RbacV1().ClusterRoles().Delete(context.Background(), grant.Name, metav1.DeleteOptions{})
	})
	bindClusterRole(t, cp, grant.Name, ns, "broker")
}

// waitLetIn waits until a handler made by newHandler is let in at addr
// after a grant (why): the broker remembers a denial for
// auth.DefaultDeniedTTL, so Hellos are refused until then; a Hello let in
// runs until its one-second context ends.
func waitLetIn(t *testing.T, newHandler func() *sdk.Handler, addr, why string) {
	t.Helper()
	testenv.WaitFor(t, waitTimeout, why+": the handler let in", func(context.Context) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var rej *sdk.RejectedError
		if err := newHandler().Run(ctx, addr); errors.As(err, &rej) {
			return fmt.Errorf("still rejected: %s", rej.Message)
		}
		return nil
	})
}

// startBrokerAsItself starts a broker over TLS in ns that authenticates
// as its own ServiceAccount (brokerIdentity), with no right beyond it,
// and returns the client side.
func startBrokerAsItself(t *testing.T, cp *controlplane.ControlPlane, ns string) *secure {
	t.Helper()
	serverTLS, pool := selfSigned(t)
	cfg := brokerIdentity(t, cp, ns, "broker")
	addr := startBroker(t, cp, func(o *broker.Options) { o.Config, o.Insecure, o.TLS, o.Namespace = cfg, false, serverTLS, ns })
	return &secure{cp: cp, ns: ns, addr: addr, clientTLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
}

// TestTheBrokerRefusesABindingItCannotServe: a broker whose own identity
// holds no right on widgets refuses, at Hello, a handler that is granted
// widgets itself, and the refusal names the binding and the rule to grant
// the broker; once a ClusterRole with that rule and the aggregation label
// is bound to the broker (here bound directly: this control plane runs no
// controller manager to aggregate it), the same handler is let in and
// served, the broker not restarted.
func TestTheBrokerRefusesABindingItCannotServe(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	s := startBrokerAsItself(t, cp, ns)
	s.grant(t, "handler", "h", handlerRule("h", "connect"), widgetRule("get", "list", "watch", "patch"))
	actAsGrant(t, s, "broker", "h")
	token := s.token(t, "h")
	var j journal
	newHandler := func() *sdk.Handler {
		h := s.handler("h", token)
		h.OnCreate(widgets, j.record(nil), sdk.Namespaces(ns))
		return h
	}

	expectRejection(t, s.rejected(t, newHandler()), "PermissionDenied", "bindings[0]",
		"the broker itself may not list widgets.v1.test.tether.dev in namespace "+ns,
		auth.AggregationLabel+`: "true"`, `apiGroups: ["test.tether.dev"], resources: ["widgets"], verbs: [get, list, watch, patch]`)

	grantBrokerWidgets(t, cp, ns)

	waitLetIn(t, newHandler, s.addr, "the broker granted the rule")
	runHandler(t, newHandler(), s.addr)
	create(t, dyn, widgetGVR, widget(ns, "w", map[string]any{"size": int64(1)}))
	j.waitCount(t, sdk.Create, "w", 1)
}

// TestTheBrokerRefusesAHandlerItCannotActAs: the broker holds no
// cluster-wide impersonate. A handler granted everything, whose install
// does not let the broker impersonate its ServiceAccount, is refused at
// Hello with the Role rule to add; once a Role with it is bound to the
// broker, the same handler is let in and its patch is written as it, the
// broker not restarted.
func TestTheBrokerRefusesAHandlerItCannotActAs(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	s := startBrokerAsItself(t, cp, ns)
	grantBrokerWidgets(t, cp, ns)
	s.grant(t, "handler", "h", handlerRule("h", "connect"), widgetRule("get", "list", "watch", "patch"))
	token := s.token(t, "h")
	newHandler := func() *sdk.Handler {
		h := s.handler("h", token)
		h.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
			ev.Patch(map[string]any{"metadata": map[string]any{"labels": map[string]any{"seen": "yes"}}})
			return nil
		}, sdk.Namespaces(ns))
		return h
	}

	expectRejection(t, s.rejected(t, newHandler()), "PermissionDenied", "handler",
		"the broker itself may not impersonate serviceaccounts.v1. h in namespace "+ns,
		`a Role in namespace `+ns+` and the rule apiGroups: [""], resources: ["serviceaccounts"], resourceNames: ["h"], verbs: [impersonate]`)

	actAsGrant(t, s, "broker", "h")
	waitLetIn(t, newHandler, s.addr, "the broker may act as the handler")
	runHandler(t, newHandler(), s.addr)
	create(t, dyn, widgetGVR, widget(ns, "w", map[string]any{"size": int64(1)}))
	testenv.WaitFor(t, waitTimeout, "the handler's label, written as it", func(ctx context.Context) error {
		w, err := dyn.Resource(widgetGVR).Namespace(ns).Get(ctx, "w", metav1.GetOptions{})
		if err == nil && w.GetLabels()["seen"] != "yes" {
			err = fmt.Errorf("labels %v", w.GetLabels())
		}
		return err
	})
}
