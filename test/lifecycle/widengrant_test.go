package lifecycle

import (
	"context"
	"crypto/tls"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/guard"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// TestAHandlersGrantIsInTheUninstallGrantBeforeItsFirstHold: a broker
// running as a ServiceAccount with its own rights makes its uninstall
// grant at start; a handler's grant bound to it after that (the handler
// installed after the broker) is in the grant by the time the broker
// holds that handler's first object, so that an uninstall deleting the
// broker's ClusterRoles at once (`kubectl delete -k`) still leaves it the
// right to release the hold. The periodic widening is an hour away: only
// the handler's Hello can have widened the grant.
func TestAHandlersGrantIsInTheUninstallGrantBeforeItsFirstHold(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	serverTLS, pool := selfSigned(t)
	cfg := brokerIdentity(t, cp, ns, "broker")
	addr := startBroker(t, cp, func(o *broker.Options) {
		o.Config, o.Insecure, o.TLS, o.Namespace, o.RecheckEvery = cfg, false, serverTLS, ns, time.Hour
	})
	rbac := cp.Client().RbacV1()
	testenv.WaitFor(t, waitTimeout, "the uninstall grant", func(ctx context.Context) error {
		_, err := rbac.ClusterRoles().Get(ctx, guard.GrantName(ns), metav1.GetOptions{})
		return err
	})

	ctx := context.Background()
	want := widgetRule("get", "list", "watch", "patch")
	grant := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "broker-widgets-" + ns, Labels: map[string]string{auth.AggregationLabel: "true"}},
		Rules:      []rbacv1.PolicyRule{want},
	}
	if _, err := rbac.ClusterRoles().Create(ctx, grant, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), grant.Name, metav1.DeleteOptions{}) })
	bindClusterRole(t, cp, grant.Name, ns, "broker")
	asBroker := kubernetes.NewForConfigOrDie(cfg)
	testenv.WaitFor(t, waitTimeout, "the broker's right to patch widgets", func(ctx context.Context) error {
		r, err := asBroker.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: "patch", Group: "test.tether.dev", Resource: "widgets",
			}},
		}, metav1.CreateOptions{})
		if err == nil && !r.Status.Allowed {
			err = fmt.Errorf("not yet: %s", r.Status.Reason)
		}
		return err
	})
	if copied := grantRules(t, rbac, ns); slices.ContainsFunc(copied, func(r rbacv1.PolicyRule) bool { return reflect.DeepEqual(r, want) }) {
		t.Fatalf("the uninstall grant has the widgets rule before the handler came: %v", copied)
	}

	s := &secure{cp: cp, ns: ns, addr: addr, clientTLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	s.grant(t, "handler", "h", handlerRule("h", "connect"), widgetRule("get", "list", "watch", "patch"))
	actAsGrant(t, s, "broker", "h")
	h := s.handler("h", s.token(t, "h"))
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil }, sdk.Namespaces(ns))
	runHandler(t, h, s.addr)
	createHeld(t, cp, ns, "h", "w")
	if copied := grantRules(t, rbac, ns); !slices.ContainsFunc(copied, func(r rbacv1.PolicyRule) bool { return reflect.DeepEqual(r, want) }) {
		t.Errorf("the broker holds a widget, and its uninstall grant lacks %v: %v", want, copied)
	}
}

// grantRules are the rules of the uninstall grant of the broker in ns.
func grantRules(t *testing.T, rbac rbacv1client.RbacV1Interface, ns string) []rbacv1.PolicyRule {
	t.Helper()
	r, err := rbac.ClusterRoles().Get(context.Background(), guard.GrantName(ns), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Rules
}
