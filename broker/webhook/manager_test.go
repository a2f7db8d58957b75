package webhook

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/broker/kube/kubetest"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/test/controlplane"
)

const brokerUser = "system:serviceaccount:tether-system:tether-broker"

var configMaps = resource.Resource{
	GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true,
}

// newManager returns a Manager on the control plane that sends the API
// server to an address where nothing listens: the tests' webhooks select
// resources nobody writes, so the API server never calls them.
func newManager(t *testing.T, opts Options) (*Manager, kubernetes.Interface) {
	t.Helper()
	cp := controlplane.Get(t)
	client := cp.Client()
	kc, err := kube.NewForConfig(cp.RESTConfig()) // the broker's own client, against the API server
	if err != nil {
		t.Fatal(err)
	}
	opts.Client, opts.Log, opts.Paths = kc, testLogger(t), testPaths
	if opts.URL == "" && opts.Service == nil {
		opts.URL = "https://127.0.0.1:1"
	}
	m, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, client
}

// removeAfter deletes the handlers' configurations when the test ends.
func removeAfter(t *testing.T, m *Manager, handlers ...string) {
	t.Cleanup(func() {
		for _, h := range handlers {
			if err := m.Remove(context.Background(), h); err != nil {
				t.Errorf("removing %s: %v", h, err)
			}
		}
	})
}

// everyOption is one validate and one mutate binding with every option
// set, and a validate binding on every subresource of a cluster-scoped
// resource.
func everyOption() []*binding.Binding {
	full := func(b *binding.Binding) {
		b.Namespaces = []string{"team-a", "team-b"}
		b.Admission.Operations = []string{binding.OpCreate, binding.OpUpdate, binding.OpDelete, binding.OpConnect}
		b.Admission.Subresource = "status"
		b.Admission.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
		b.Admission.ObjectSelector = &metav1.LabelSelector{
			MatchLabels:      map[string]string{"app": "web"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"db"}}},
		}
		b.Admission.MatchConditions = []binding.MatchCondition{
			{Name: "not-kube-system", Expression: `request.namespace != "kube-system"`},
			{Name: "example.tether.dev/has-name", Expression: `has(request.name)`},
		}
		b.Admission.Timeout = 5 * time.Second
		b.Admission.FailurePolicy = binding.FailFail
		b.Admission.SideEffects = binding.SideEffectsNoneOnDryRun
	}
	return []*binding.Binding{
		admissionBinding("check", full),
		admissionBinding("defaults", mutate, full),
		admissionBinding("cluster", strict, func(b *binding.Binding) {
			b.Resource = clusterGadgets
			b.Admission.Subresource = "*"
		}),
		{ID: "on-create", Kind: binding.Create, Resource: gadgets},
	}
}

// excludedNamespaces are given to the Managers of these tests out of order
// and with a repeat, as a flag may list them; systemNamespaces is how the
// webhooks carry them.
var (
	excludedNamespaces = []string{"kube-system", "tether-system", "kube-node-lease", "kube-system"}
	systemNamespaces   = []string{"kube-node-lease", "kube-system", "tether-system"}
)

func TestSyncWritesConfigurationsTheAPIServerAccepts(t *testing.T) {
	ca := testCA(t, "tether test CA")
	m, client := newManager(t, Options{CABundle: func() []byte { return ca }, ExcludeUsers: []string{brokerUser}, ExcludeNamespaces: excludedNamespaces})
	removeAfter(t, m, "every-option")
	ctx := t.Context()
	if err := m.Sync(ctx, "every-option", everyOption(), false); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	want := builder{handler: "every-option", url: "https://127.0.0.1:1", paths: testPaths, ca: ca, excludeUsers: []string{brokerUser},
		excludeNamespaces: systemNamespaces}.build(everyOption(), false)

	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "tether-every-option", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the validating configuration: %v", err)
	}
	if !managed(v, "every-option") {
		t.Errorf("validating configuration labels %v, want the broker's", v.Labels)
	}
	if !validatingKind(kubetest.Wrap(client)).sameWebhooks(&admissionregistrationv1.ValidatingWebhookConfiguration{Webhooks: want.validating}, v) {
		t.Errorf("validating webhooks read back:\n %s\nwant %s", toJSON(t, v.Webhooks), toJSON(t, want.validating))
	}
	mu, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "tether-every-option", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the mutating configuration: %v", err)
	}
	if !managed(mu, "every-option") {
		t.Errorf("mutating configuration labels %v, want the broker's", mu.Labels)
	}
	if !mutatingKind(kubetest.Wrap(client)).sameWebhooks(&admissionregistrationv1.MutatingWebhookConfiguration{Webhooks: want.mutating}, mu) {
		t.Errorf("mutating webhooks read back:\n %s\nwant %s", toJSON(t, mu.Webhooks), toJSON(t, want.mutating))
	}
	if n := len(v.Webhooks) + len(mu.Webhooks); n != 3 {
		t.Errorf("%d webhooks, want 3 (one per admission binding)", n)
	}
}

func TestSecondSyncWritesNothing(t *testing.T) {
	ca := testCA(t, "tether test CA")
	m, client := newManager(t, Options{CABundle: func() []byte { return ca }, ExcludeUsers: []string{brokerUser}, ExcludeNamespaces: excludedNamespaces})
	removeAfter(t, m, "idempotent")
	ctx := t.Context()
	if err := m.Sync(ctx, "idempotent", everyOption(), false); err != nil {
		t.Fatalf("first Sync: %v", err)
	}
	vBefore, mBefore := resourceVersions(t, client, "tether-idempotent")
	if err := m.Sync(ctx, "idempotent", everyOption(), false); err != nil {
		t.Fatalf("second Sync: %v", err)
	}
	m.resyncAll(ctx)
	vAfter, mAfter := resourceVersions(t, client, "tether-idempotent")
	if vBefore != vAfter || mBefore != mAfter {
		t.Errorf("resourceVersions changed from %s/%s to %s/%s: an unchanged Sync wrote", vBefore, mBefore, vAfter, mAfter)
	}
}

func resourceVersions(t *testing.T, client kubernetes.Interface, name string) (validating, mutating string) {
	t.Helper()
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the validating configuration: %v", err)
	}
	mu, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the mutating configuration: %v", err)
	}
	return v.ResourceVersion, mu.ResourceVersion
}

// webhookNames returns the webhooks of the handler's configurations; nil
// for a configuration that does not exist.
func webhookNames(t *testing.T, client kubernetes.Interface, handler string) (validating, mutating []string) {
	t.Helper()
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), ConfigName(handler), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatalf("reading the validating configuration: %v", err)
	default:
		validating = []string{}
		for _, w := range v.Webhooks {
			validating = append(validating, w.Name+"="+string(*w.FailurePolicy))
		}
	}
	mu, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), ConfigName(handler), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatalf("reading the mutating configuration: %v", err)
	default:
		mutating = []string{}
		for _, w := range mu.Webhooks {
			mutating = append(mutating, w.Name+"="+string(*w.FailurePolicy))
		}
	}
	return validating, mutating
}

func TestAbsentHandlerKeepsOnlyStrictWebhooks(t *testing.T) {
	m, client := newManager(t, Options{})
	removeAfter(t, m, "absentee")
	ctx := t.Context()
	all := []*binding.Binding{
		admissionBinding("loose"),
		admissionBinding("strict", strict),
		admissionBinding("mutate", mutate),
	}
	steps := []struct {
		name                 string
		bindings             []*binding.Binding
		absent               bool
		validating, mutating []string // nil: no configuration
	}{{
		name: "present", bindings: all,
		validating: []string{"loose.absentee.tether.dev=Ignore", "strict.absentee.tether.dev=Fail"},
		mutating:   []string{"mutate.absentee.tether.dev=Ignore"},
	}, {
		name: "absent", bindings: all, absent: true,
		validating: []string{"strict.absentee.tether.dev=Fail"},
	}, {
		name: "absent without STRICT bindings", bindings: []*binding.Binding{all[0], all[2]}, absent: true,
	}, {
		name: "back", bindings: all,
		validating: []string{"loose.absentee.tether.dev=Ignore", "strict.absentee.tether.dev=Fail"},
		mutating:   []string{"mutate.absentee.tether.dev=Ignore"},
	}, {
		name: "admission bindings dropped", bindings: []*binding.Binding{{ID: "on-create", Kind: binding.Create, Resource: gadgets}},
	}}
	for _, s := range steps {
		if err := m.Sync(ctx, "absentee", s.bindings, s.absent); err != nil {
			t.Fatalf("%s: Sync: %v", s.name, err)
		}
		v, mu := webhookNames(t, client, "absentee")
		if !slices.Equal(v, s.validating) || (v == nil) != (s.validating == nil) {
			t.Errorf("%s: validating webhooks %q, want %q", s.name, v, s.validating)
		}
		if !slices.Equal(mu, s.mutating) || (mu == nil) != (s.mutating == nil) {
			t.Errorf("%s: mutating webhooks %q, want %q", s.name, mu, s.mutating)
		}
	}
}

func TestSyncLeavesOthersConfigurationsAlone(t *testing.T) {
	m, client := newManager(t, Options{})
	ctx := t.Context()
	// Someone else's configuration that happens to have the broker's name.
	foreign := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ConfigName("squatted")}}
	foreign, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, foreign, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a foreign configuration: %v", err)
	}
	t.Cleanup(func() {
		_ = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), foreign.Name, metav1.DeleteOptions{})
	})
	err = m.Sync(ctx, "squatted", []*binding.Binding{admissionBinding("check")}, false)
	if err == nil || !strings.Contains(err.Error(), "not managed by the broker") {
		t.Errorf("Sync over a foreign configuration: %v, want an error saying it is not managed by the broker", err)
	}
	if err := m.Remove(ctx, "squatted"); err != nil {
		t.Errorf("Remove: %v", err)
	}
	after, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, foreign.Name, metav1.GetOptions{})
	if err != nil || after.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("the foreign configuration was touched: %v, resourceVersion %s -> %s", err, foreign.ResourceVersion, after.ResourceVersion)
	}
}

func TestRemoveAllRemovesOnlyManagedConfigurations(t *testing.T) {
	m, client := newManager(t, Options{})
	ctx := t.Context()
	both := []*binding.Binding{admissionBinding("v"), admissionBinding("m", mutate)}
	for _, h := range []string{"first", "second"} {
		if err := m.Sync(ctx, h, both, false); err != nil {
			t.Fatalf("Sync %s: %v", h, err)
		}
	}
	// Written by another broker process: RemoveAll finds it by its labels.
	other, _ := newManager(t, Options{})
	if err := other.Sync(ctx, "third", both[:1], false); err != nil {
		t.Fatalf("Sync third: %v", err)
	}
	foreign := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
		Name: "someone-else", Labels: map[string]string{labelManagedBy: "helm"},
	}}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a foreign configuration: %v", err)
	}
	t.Cleanup(func() {
		_ = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), foreign.Name, metav1.DeleteOptions{})
	})

	removed, err := m.RemoveAll(ctx)
	if err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	slices.Sort(removed)
	want := []string{
		"mutatingwebhookconfigurations/tether-first", "mutatingwebhookconfigurations/tether-second",
		"validatingwebhookconfigurations/tether-first", "validatingwebhookconfigurations/tether-second",
		"validatingwebhookconfigurations/tether-third",
	}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	for _, h := range []string{"first", "second", "third"} {
		if v, mu := webhookNames(t, client, h); v != nil || mu != nil {
			t.Errorf("handler %s still has webhooks %q and %q", h, v, mu)
		}
	}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, foreign.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the foreign configuration: %v", err)
	}
	// Forgotten: a resync does not bring them back.
	m.resyncAll(ctx)
	if v, mu := webhookNames(t, client, "first"); v != nil || mu != nil {
		t.Errorf("a resync after RemoveAll re-created %q and %q", v, mu)
	}
}

// startManager runs m.Start until the test ends.
func startManager(t *testing.T, m *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
}

func TestStartRepairsConfigurationsChangedByHand(t *testing.T) {
	m, client := newManager(t, Options{Resync: 50 * time.Millisecond})
	removeAfter(t, m, "repaired")
	ctx := t.Context()
	if err := m.Sync(ctx, "repaired", []*binding.Binding{admissionBinding("v"), admissionBinding("m", mutate)}, false); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	startManager(t, m)

	validating := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if err := validating.Delete(ctx, "tether-repaired", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting by hand: %v", err)
	}
	eventually(t, "the deleted configuration is back", func(ctx context.Context) (bool, error) {
		_, err := validating.Get(ctx, "tether-repaired", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})

	mutating := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	edited, err := mutating.Get(ctx, "tether-repaired", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the mutating configuration: %v", err)
	}
	edited.Webhooks[0].TimeoutSeconds = ptr(int32(29))
	if _, err := mutating.Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("editing by hand: %v", err)
	}
	eventually(t, "the edited webhook is restored", func(ctx context.Context) (bool, error) {
		c, err := mutating.Get(ctx, "tether-repaired", metav1.GetOptions{})
		return err == nil && *c.Webhooks[0].TimeoutSeconds == 10, err
	})
}

func TestStartPicksUpChangedCABundle(t *testing.T) {
	var ca atomic.Pointer[[]byte]
	first, second := testCA(t, "first"), testCA(t, "second")
	ca.Store(&first)
	// A resync period the test never reaches: only CAChanged can explain
	// the update.
	m, client := newManager(t, Options{Resync: time.Hour, CABundle: func() []byte { return *ca.Load() }})
	removeAfter(t, m, "rotated")
	ctx := t.Context()
	if err := m.Sync(ctx, "rotated", []*binding.Binding{admissionBinding("v"), admissionBinding("m", mutate)}, false); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	startManager(t, m)
	ca.Store(&second)
	m.CAChanged()
	eventually(t, "both configurations carry the new CA", func(ctx context.Context) (bool, error) {
		v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "tether-rotated", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mu, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "tether-rotated", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, second) && bytes.Equal(mu.Webhooks[0].ClientConfig.CABundle, second), nil
	})
}

func TestNewChecksOptions(t *testing.T) {
	client := fake.NewClientset()
	tests := []struct {
		name string
		opts Options
		err  string // empty: valid
	}{
		{name: "a URL", opts: Options{Client: kubetest.Wrap(client), URL: "https://127.0.0.1:8443/", Paths: testPaths}},
		{name: "a Service", opts: Options{Client: kubetest.Wrap(client), Service: &Service{Namespace: "tether-system", Name: "tether-broker"}, Paths: testPaths}},
		{name: "an endpoint without a path key", opts: Options{Client: kubetest.Wrap(client), URL: "https://127.0.0.1:8443/"}, err: "Paths is required"},
		{name: "only removing", opts: Options{Client: kubetest.Wrap(client)}},
		{name: "no client", opts: Options{URL: "https://x"}, err: "Client is required"},
		{name: "both", opts: Options{Client: kubetest.Wrap(client), URL: "https://x", Service: &Service{Namespace: "n", Name: "s"}}, err: "exclusive"},
		{name: "plain http", opts: Options{Client: kubetest.Wrap(client), URL: "http://127.0.0.1:8443"}, err: "https"},
		{name: "a query", opts: Options{Client: kubetest.Wrap(client), URL: "https://x/?a=b"}, err: "https"},
		{name: "no host", opts: Options{Client: kubetest.Wrap(client), URL: "https:///admit"}, err: "https"},
		{name: "a Service without name", opts: Options{Client: kubetest.Wrap(client), Service: &Service{Namespace: "n"}}, err: "name"},
		{name: "a Service port out of range", opts: Options{Client: kubetest.Wrap(client), Service: &Service{Namespace: "n", Name: "s", Port: 70000}}, err: "port"},
		{name: "a negative resync", opts: Options{Client: kubetest.Wrap(client), Resync: -time.Second}, err: "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("New: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("New: %v, want an error containing %q", err, tt.err)
			}
		})
	}
}

func TestSyncWithoutEndpointFailsOnlyWhenItWouldWrite(t *testing.T) {
	m, err := New(Options{Client: kubetest.Wrap(fake.NewClientset())})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(t.Context(), "h", []*binding.Binding{admissionBinding("v")}, false); err == nil || !strings.Contains(err.Error(), "no admission endpoint") {
		t.Errorf("Sync with a webhook to write: %v, want an error about the missing endpoint", err)
	}
	if err := m.Sync(t.Context(), "h", []*binding.Binding{admissionBinding("v")}, true); err != nil {
		t.Errorf("Sync of an absent handler without STRICT bindings: %v", err)
	}
}

// TestExcludedUsersBypassTheWebhook has the API server call (and fail to
// reach) a webhook that fails closed, then shows the match condition lets
// the excluded user through, and the namespace list keeps other namespaces
// out.
func TestExcludedUsersBypassTheWebhook(t *testing.T) {
	cp := controlplane.Get(t)
	client := cp.Client()
	ctx := t.Context()
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("asking who the test is: %v", err)
	}
	me := review.Status.UserInfo.Username
	guarded, other := cp.Namespace(t), cp.Namespace(t)
	bindings := []*binding.Binding{admissionBinding("guard", strict, func(b *binding.Binding) {
		b.Resource = configMaps
		b.Namespaces = []string{guarded}
		b.Admission.Operations = []string{binding.OpCreate}
	})}
	create := func(ctx context.Context, ns string) error {
		_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{})
		return err
	}

	strictM, _ := newManager(t, Options{})
	removeAfter(t, strictM, "guard")
	if err := strictM.Sync(ctx, "guard", bindings, true); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	eventually(t, "the unreachable webhook refuses creates in the guarded namespace", func(ctx context.Context) (bool, error) {
		err := create(ctx, guarded)
		return err != nil && strings.Contains(err.Error(), `failed calling webhook "guard.guard.tether.dev"`), nil
	})
	if err := create(ctx, other); err != nil {
		t.Errorf("creating in a namespace the binding does not list: %v", err)
	}

	excluding, _ := newManager(t, Options{ExcludeUsers: []string{"someone-else", me}})
	if err := excluding.Sync(ctx, "guard", bindings, true); err != nil {
		t.Fatalf("Sync excluding %s: %v", me, err)
	}
	eventually(t, "the excluded user's creates pass", func(ctx context.Context) (bool, error) {
		return create(ctx, guarded) == nil, nil
	})
}

func TestConcurrentSyncsAndResyncsAgree(t *testing.T) {
	m, client := newManager(t, Options{Resync: 5 * time.Millisecond})
	handlers := []string{"busy-a", "busy-b"}
	removeAfter(t, m, handlers...)
	startManager(t, m)
	bindings := []*binding.Binding{admissionBinding("v"), admissionBinding("m", mutate)}
	var g errgroup.Group
	for i := range 8 {
		g.Go(func() error { return m.Sync(t.Context(), handlers[i%2], bindings, i >= 4) })
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	for _, h := range handlers {
		if err := m.Sync(t.Context(), h, bindings, false); err != nil {
			t.Fatalf("Sync %s: %v", h, err)
		}
		v, mu := webhookNames(t, client, h)
		if len(v) != 1 || len(mu) != 1 {
			t.Errorf("handler %s has webhooks %q and %q, want one of each", h, v, mu)
		}
	}
}

// TestWebhooksPointAtEveryReplicaOnlyForHandlersOnEveryReplica: with an
// endpoint for every replica, a handler whose instances keep a session to
// every replica gets webhooks pointing there, another the leader's; a
// Manager that knows nothing of a handler yet (a new leader restoring it)
// keeps where its configurations point.
func TestWebhooksPointAtEveryReplicaOnlyForHandlersOnEveryReplica(t *testing.T) {
	opts := Options{URL: "https://127.0.0.1:1", ReplicasURL: "https://127.0.0.1:2"}
	m, client := newManager(t, opts)
	removeAfter(t, m, "everywhere", "leader-only")
	ctx := t.Context()
	bindings := []*binding.Binding{admissionBinding("v")}
	if err := m.SyncTo(ctx, "everywhere", bindings, false, TargetEveryReplica); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncTo(ctx, "leader-only", bindings, false, TargetLeader); err != nil {
		t.Fatal(err)
	}
	pointsAt := func(handler string) string {
		t.Helper()
		c, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, ConfigName(handler), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *c.Webhooks[0].ClientConfig.URL
	}
	if got := pointsAt("everywhere"); !strings.HasPrefix(got, "https://127.0.0.1:2/") {
		t.Errorf("the webhook of a handler on every replica points at %s, want the replicas' endpoint", got)
	}
	if got := pointsAt("leader-only"); !strings.HasPrefix(got, "https://127.0.0.1:1/") {
		t.Errorf("the webhook of a handler on the leader only points at %s, want the leader's endpoint", got)
	}
	next, _ := newManager(t, opts) // the next leader, restoring both
	for _, h := range []string{"everywhere", "leader-only"} {
		before := pointsAt(h)
		if err := next.Sync(ctx, h, bindings, false); err != nil {
			t.Fatal(err)
		}
		if got := pointsAt(h); got != before {
			t.Errorf("a Sync that keeps the target moved %s's webhook from %s to %s", h, before, got)
		}
	}
	// A replica that starts reads which handlers it must wait for.
	starting, _ := newManager(t, opts)
	every, err := starting.EveryReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(every, "everywhere") || slices.Contains(every, "leader-only") {
		t.Errorf("EveryReplica = %q, want everywhere and not leader-only", every)
	}
}
