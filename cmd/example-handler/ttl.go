package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/sdk"
)

// annTTL is the annotation that gives a Secret its lifetime, as a Go
// duration ("90s", "24h").
const annTTL = "ttl.tether.dev/ttl"

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// reaper deletes Secrets whose ttl annotation has run out.
type reaper struct {
	dyn dynamic.Interface
	now func() time.Time
}

// register binds the reaper: a timer on Secrets that have the annotation,
// with finalizer policy NONE, so a Secret with a ttl is never held.
func (r *reaper) register(h *sdk.Handler, interval time.Duration, scope []sdk.BindingOption) {
	opts := append(slices.Clone(scope), sdk.AnnotationPresent(annTTL),
		sdk.Finalizer(sdk.FinalizerNone), sdk.ID("ttl-secrets"))
	h.OnTimer(sdk.GVR("", "v1", "secrets"), interval, r.tick, opts...)
}

// tick deletes the Secret once its creation time plus its ttl has passed.
// Only the object that ticked is deleted (UID precondition): a Secret
// re-created under the same name is another object with its own lifetime.
func (r *reaper) tick(ctx context.Context, ev *sdk.Event) error {
	ttl, err := parseTTL(ev.Object().GetAnnotations()[annTTL])
	if err != nil {
		return sdk.Permanent(err)
	}
	created := ev.Object().GetCreationTimestamp().Time
	if !expired(created, ttl, r.now()) {
		return nil
	}
	uid := ev.Object().GetUID()
	err = r.dyn.Resource(secretsGVR).Namespace(ev.Namespace).Delete(ctx, ev.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // already gone, or the name now belongs to another Secret
	case err != nil:
		return fmt.Errorf("deleting the expired Secret: %w", err)
	}
	ev.Logger().Info("Secret reaped", "ttl", ttl, "age", r.now().Sub(created).Round(time.Second))
	return nil
}

// errNoTTL is returned by parseTTL for an empty value.
var errNoTTL = errors.New("annotation " + annTTL + " is empty")

// parseTTL reads the ttl annotation's value: a non-negative Go duration.
func parseTTL(s string) (time.Duration, error) {
	if s == "" {
		return 0, errNoTTL
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("annotation %s: %q is not a Go duration such as 90s or 24h", annTTL, s)
	}
	if d < 0 {
		return 0, fmt.Errorf("annotation %s: %q is negative", annTTL, s)
	}
	return d, nil
}

// expired reports whether an object created at created with this ttl is
// due for deletion at now.
func expired(created time.Time, ttl time.Duration, now time.Time) bool {
	return !now.Before(created.Add(ttl))
}
