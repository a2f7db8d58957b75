package webhook

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/kube"
)

// config is one of the two configuration types.
type config interface {
	*admissionregistrationv1.ValidatingWebhookConfiguration | *admissionregistrationv1.MutatingWebhookConfiguration
	metav1.Object
}

// configClient is what the typed clients of both configuration types have
// in common.
type configClient[T config] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// kind applies one configuration type. Go cannot reach the Webhooks field
// through a type parameter, so the parts that touch it are functions.
type kind[T config] struct {
	// resource names the type in errors, logs and RemoveAll's answer.
	resource string
	client   configClient[T]
	// list returns the configurations matching a label selector.
	list func(ctx context.Context, selector string) ([]T, error)
	// sameWebhooks reports whether have already holds want's webhooks.
	sameWebhooks func(want, have T) bool
	// withWebhooks returns a copy of have holding want's webhooks.
	withWebhooks func(have, want T) T
}

func validatingKind(c kube.Interface) kind[*admissionregistrationv1.ValidatingWebhookConfiguration] {
	return kind[*admissionregistrationv1.ValidatingWebhookConfiguration]{
		resource: "validatingwebhookconfigurations",
		client:   c.AdmissionregistrationV1().ValidatingWebhookConfigurations(),
		list: func(ctx context.Context, selector string) ([]*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
			l, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return nil, err
			}
			out := make([]*admissionregistrationv1.ValidatingWebhookConfiguration, len(l.Items))
			for i := range l.Items {
				out[i] = &l.Items[i]
			}
			return out, nil
		},
		sameWebhooks: func(want, have *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
			return equality.Semantic.DeepEqual(want.Webhooks, have.Webhooks)
		},
		withWebhooks: func(have, want *admissionregistrationv1.ValidatingWebhookConfiguration) *admissionregistrationv1.ValidatingWebhookConfiguration {
			out := have.DeepCopy()
			out.Webhooks = want.Webhooks
			return out
		},
	}
}

func mutatingKind(c kube.Interface) kind[*admissionregistrationv1.MutatingWebhookConfiguration] {
	return kind[*admissionregistrationv1.MutatingWebhookConfiguration]{
		resource: "mutatingwebhookconfigurations",
		client:   c.AdmissionregistrationV1().MutatingWebhookConfigurations(),
		list: func(ctx context.Context, selector string) ([]*admissionregistrationv1.MutatingWebhookConfiguration, error) {
			l, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return nil, err
			}
			out := make([]*admissionregistrationv1.MutatingWebhookConfiguration, len(l.Items))
			for i := range l.Items {
				out[i] = &l.Items[i]
			}
			return out, nil
		},
		sameWebhooks: func(want, have *admissionregistrationv1.MutatingWebhookConfiguration) bool {
			return equality.Semantic.DeepEqual(want.Webhooks, have.Webhooks)
		},
		withWebhooks: func(have, want *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.MutatingWebhookConfiguration {
			out := have.DeepCopy()
			out.Webhooks = want.Webhooks
			return out
		},
	}
}

// apply makes the handler's configuration of kind k equal to want, or
// deletes it when want is nil. It reads the configuration first and writes
// only when it differs; a write that loses a race (conflict, already exists,
// gone) is retried once on a fresh read.
func apply[T config](ctx context.Context, log hclog.Logger, k kind[T], handler string, want T) error {
	name := ConfigName(handler)
	for attempt := 0; ; attempt++ {
		err := applyOnce(ctx, log, k, handler, want)
		if err == nil {
			return nil
		}
		raced := apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
		if !raced || attempt > 0 {
			return fmt.Errorf("syncing %s %s: %w", k.resource, name, err)
		}
	}
}

// applyOnce does one read and at most one write.
func applyOnce[T config](ctx context.Context, log hclog.Logger, k kind[T], handler string, want T) error {
	name := ConfigName(handler)
	var none T
	have, err := k.client.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if want == none {
			return nil
		}
		if _, err := k.client.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return err
		}
		log.Info("webhook configuration created", "resource", k.resource, "name", name)
		return nil
	case err != nil:
		return fmt.Errorf("reading: %w", err)
	}
	if !managed(have, handler) {
		if want == none {
			return nil
		}
		return fmt.Errorf("%s %s exists and is not managed by the broker (labels %s=%s, %s=%s missing)",
			k.resource, name, labelManagedBy, managedBy, labelHandler, handler)
	}
	if want == none {
		uid, rv := have.GetUID(), have.GetResourceVersion()
		err := k.client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		log.Info("webhook configuration deleted", "resource", k.resource, "name", name)
		return nil
	}
	if k.sameWebhooks(want, have) {
		return nil
	}
	// The resourceVersion read is kept: the update fails with a conflict
	// rather than overwrite an edit made since.
	if _, err := k.client.Update(ctx, k.withWebhooks(have, want), metav1.UpdateOptions{}); err != nil {
		return err
	}
	log.Info("webhook configuration updated", "resource", k.resource, "name", name)
	return nil
}

func managed(obj metav1.Object, handler string) bool {
	l := obj.GetLabels()
	return l[labelManagedBy] == managedBy && l[labelHandler] == handler
}

// removeAll deletes every configuration of kind k the broker manages and
// returns them as resource/name.
func removeAll[T config](ctx context.Context, log hclog.Logger, k kind[T], handler string, dryRun bool) ([]string, error) {
	selector := labelManagedBy + "=" + managedBy + "," + labelHandler
	if handler != "" {
		selector += "=" + handler
	}
	items, err := k.list(ctx, selector)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", k.resource, err)
	}
	var removed []string
	for _, c := range items {
		if dryRun {
			removed = append(removed, k.resource+"/"+c.GetName())
			continue
		}
		uid := c.GetUID()
		err := k.client.Delete(ctx, c.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return removed, fmt.Errorf("deleting %s %s: %w", k.resource, c.GetName(), err)
		}
		log.Info("webhook configuration deleted", "resource", k.resource, "name", c.GetName())
		removed = append(removed, k.resource+"/"+c.GetName())
	}
	return removed, nil
}
