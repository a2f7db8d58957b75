package example

import (
	"context"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// badTTLMessage is the example handler's answer to ttl "banana".
const badTTLMessage = `ttl.tether.dev/ttl: "banana" is not a duration such as 1h or 30m`

// createAsTester creates a Secret in e's namespace as the tester, whom the
// webhooks review, and returns the API server's error.
func (e *env) createAsTester(name string, annotations map[string]string) error {
	obj := object(secretsGVR, e.ns, name, annotations, map[string]string{"k": "v"})
	if name == "" {
		obj.SetGenerateName("probe-")
	}
	_, err := e.tester.Resource(secretsGVR).Namespace(e.ns).Create(context.Background(), obj, metav1.CreateOptions{})
	return err
}

func TestWebhookRefusesASecretWithABadTTL(t *testing.T) {
	t.Parallel()
	e := start(t)
	// The configuration is written once the handler has connected, and the
	// API server takes a moment to load it: until then a probe is admitted
	// (and stays behind, in the test's namespace).
	var err error
	eventually(t, "the webhook to refuse a Secret with ttl banana", func() bool {
		err = e.createAsTester("", map[string]string{AnnTTL: "banana"})
		if err != nil && !strings.Contains(err.Error(), badTTLMessage) {
			t.Fatalf("creating a Secret with ttl banana: %v", err)
		}
		return err != nil
	})
	if !apierrors.IsForbidden(err) {
		t.Errorf("refused with %v, want 403 Forbidden", err)
	}
	t.Logf("refused: %v", err)

	if err := e.createAsTester("good", map[string]string{AnnTTL: "1h"}); err != nil {
		t.Fatalf("a Secret with ttl 1h is refused: %v", err)
	}
	if err := e.createAsTester("no-ttl", nil); err != nil {
		t.Fatalf("a Secret without a ttl is refused: %v", err)
	}

	// UPDATE is reviewed too: the stored Secret keeps its good ttl.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := e.tester.Resource(secretsGVR).Namespace(e.ns).Get(context.Background(), "good", metav1.GetOptions{})
		if err != nil {
			return err
		}
		anns := cur.GetAnnotations()
		anns[AnnTTL] = "0s"
		cur.SetAnnotations(anns)
		_, err = e.tester.Resource(secretsGVR).Namespace(e.ns).Update(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), `ttl.tether.dev/ttl: "0s" is not positive`) {
		t.Fatalf("updating the ttl to 0s: %v, want the handler's refusal", err)
	}
	if got := e.get(t, secretsGVR, e.ns, "good"); got.GetAnnotations()[AnnTTL] != "1h" {
		t.Errorf("the refused update was stored: ttl %q", got.GetAnnotations()[AnnTTL])
	}
	e.checkTTLWebhookConfiguration(t)
}

// checkTTLWebhookConfiguration checks what the broker wrote for the
// handler: one webhook for Secrets, on CREATE and UPDATE, failing open,
// limited to the handler's namespace.
func (e *env) checkTTLWebhookConfiguration(t *testing.T) {
	t.Helper()
	cfg, err := e.cp.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "tether-"+e.handler, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the handler's ValidatingWebhookConfiguration: %v", err)
	}
	if len(cfg.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1 (the ttl check): %+v", len(cfg.Webhooks), cfg.Webhooks)
	}
	w := cfg.Webhooks[0]
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("failure policy %v, want Ignore: a missing handler must not block the cluster", w.FailurePolicy)
	}
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Resources, []string{"secrets"}) ||
		!slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) {
		t.Errorf("rules %+v, want CREATE and UPDATE of secrets", w.Rules)
	}
	if w.NamespaceSelector == nil || !strings.Contains(w.NamespaceSelector.String(), e.ns) {
		t.Errorf("namespace selector %v does not name the handler's namespace %s", w.NamespaceSelector, e.ns)
	}
	if _, err := e.cp.Client().AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "tether-"+e.handler, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a MutatingWebhookConfiguration for a handler that mutates nothing: %v", err)
	}
}
