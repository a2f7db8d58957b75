package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

const (
	admissionLabel = "conformance.tether.dev/admission"
	mutatedLabel   = "conformance.tether.dev/mutated"
	denyMessage    = "conformance: denied"
)

// admissionAnswer creates a widget the validate binding refuses and one it
// allows, once a dry run shows the broker's webhook is in place (the API
// server takes a moment to pick up the configuration the broker writes).
func (k *kit) admissionAnswer(ctx context.Context) error {
	if err := k.awaitWebhook(ctx, "denied", "deny", func(_ *unstructured.Unstructured, err error) bool {
		return apierrors.IsForbidden(err)
	}); err != nil {
		return err
	}
	_, err := k.widgets().Create(ctx, widget("denied", "deny", admissionLabel), metav1.CreateOptions{})
	switch {
	case err == nil:
		return errors.New("widget denied was created: the validate binding allowed it")
	case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), denyMessage):
		return fmt.Errorf("creating widget denied: %v, want Forbidden with %q", err, denyMessage)
	}
	if err := k.createWidget(ctx, "allowed", "ok", admissionLabel); err != nil {
		return fmt.Errorf("the validate binding refused a widget it allows: %w", err)
	}
	return k.reviewsAnsweredOK(ctx, "allowed", 2) // one review for each binding
}

// admissionPatch creates a widget the mutate binding labels.
func (k *kit) admissionPatch(ctx context.Context) error {
	isMutated := func(o *unstructured.Unstructured, err error) bool {
		return err == nil && o.GetLabels()[mutatedLabel] == "yes"
	}
	if err := k.awaitWebhook(ctx, "mutated", "mutate", isMutated); err != nil {
		return err
	}
	o, err := k.widgets().Create(ctx, widget("mutated", "mutate", admissionLabel), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating widget mutated: %w", err)
	}
	if !isMutated(o, nil) {
		return fmt.Errorf("widget mutated was created with the labels %v, without %s=yes", o.GetLabels(), mutatedLabel)
	}
	return k.reviewsAnsweredOK(ctx, "mutated", 2)
}

// awaitWebhook dry-runs the creation of a labelled widget until done holds
// for its outcome.
func (k *kit) awaitWebhook(ctx context.Context, name, scenario string, done func(*unstructured.Unstructured, error) bool) error {
	return k.poll(ctx, "webhook answering a dry run of widget "+name, func(ctx context.Context) (bool, error) {
		o, err := k.widgets().Create(ctx, widget(name, scenario, admissionLabel), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return done(o, err), nil
	})
}

// reviewsAnsweredOK checks that the reviews of the widget name the handler
// answered were answered OK, with an answer.
func (k *kit) reviewsAnsweredOK(ctx context.Context, name string, n int) error {
	acks, err := k.awaitAcks(ctx, name, tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION, n)
	if err != nil {
		return err
	}
	for _, a := range acks {
		if a.a.GetOutcome() != tetherv1.Outcome_OUTCOME_OK || a.a.GetAdmission() == nil {
			return fmt.Errorf("a review of widget %s acked %v (%s) with admission %v, want OK with an answer", name, a.a.GetOutcome(), a.a.GetMessage(), a.a.GetAdmission())
		}
	}
	return nil
}
