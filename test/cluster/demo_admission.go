package main

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/test/example"
)

const (
	// badTTLName is the Secret the TTL reaper's webhook refuses.
	badTTLName = "session-key"
	// demoUser is who the demo impersonates for requests the webhooks
	// must review: the broker's own user (the kubeconfig's) skips them.
	demoUser = "alice"
)

// badTTL: a Secret whose ttl is not a duration is refused by the TTL
// reaper's validating webhook, which the broker serves and the handler
// answers; with a good ttl it is admitted.
func (d *demo) badTTL(ctx context.Context) error {
	d.next("As user %s, create Secret %s/%s with %s=banana; the TTL reaper's webhook refuses it.",
		demoUser, sourceNS, badTTLName, example.AnnTTL)
	want := fmt.Sprintf("%s: %q is not a duration", example.AnnTTL, "banana")
	var refusal error
	// The configuration is written once the handler is connected, and the
	// API server takes a moment to load it; a Secret admitted before then
	// is deleted and tried again.
	if err := d.waitFor(ctx, "the API server to refuse "+sourceNS+"/"+badTTLName, func(ctx context.Context) (bool, error) {
		err := d.createAsUser(ctx, badTTLName, "banana")
		switch {
		case err == nil:
			return false, d.kube.CoreV1().Secrets(sourceNS).Delete(ctx, badTTLName, metav1.DeleteOptions{})
		case strings.Contains(err.Error(), want):
			refusal = err
			return true, nil
		}
		return false, err
	}); err != nil {
		return err
	}
	d.say("    refused: %v", refusal)
	cfg, err := d.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "tether-"+handlerName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the handler's webhook configuration: %w", err)
	}
	for _, w := range cfg.Webhooks {
		url := ""
		if w.ClientConfig.URL != nil {
			url = *w.ClientConfig.URL
		}
		var failure string
		if w.FailurePolicy != nil {
			failure = string(*w.FailurePolicy)
		}
		d.say("    ValidatingWebhookConfiguration %s: webhook %s, failurePolicy %s, served by the broker at %s",
			cfg.Name, w.Name, failure, url)
	}
	if err := d.createAsUser(ctx, badTTLName, "1h"); err != nil {
		return fmt.Errorf("with %s=1h: %w", example.AnnTTL, err)
	}
	d.say("    with %s=1h, %s/%s is admitted. The broker serves the webhook and asks the handler, which serves", example.AnnTTL, sourceNS, badTTLName)
	d.say("    no HTTPS. The broker's own requests skip its webhooks, so the demo asks as %s.", demoUser)
	return nil
}

// createAsUser creates the Secret name in sourceNS with the ttl, as
// demoUser.
func (d *demo) createAsUser(ctx context.Context, name, ttl string) error {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sourceNS, Annotations: map[string]string{example.AnnTTL: ttl}},
		Data:       map[string][]byte{"key": []byte("k3y")},
	}
	_, err := d.asUser.CoreV1().Secrets(sourceNS).Create(ctx, s, metav1.CreateOptions{})
	return err
}
