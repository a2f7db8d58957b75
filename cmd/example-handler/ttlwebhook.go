package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tether-dev/tether/sdk"
)

// registerTTLWebhook binds the TTL reaper's validating webhook: a Secret
// whose ttl annotation the reaper could not use is refused when it is
// written (CREATE, UPDATE), so the client sees the mistake at once rather
// than a Warning Event later. The failure policy is the default, FailOpen:
// while no instance of the handler answers, Secrets are admitted unchecked,
// so the example never blocks the cluster. failClosed makes it FailClosed:
// such a Secret is then refused until an instance answers.
//
// The match condition makes the API server skip the webhook for every
// other Secret, so their writes never wait for the broker; AnnotationPresent
// makes the broker admit them without asking, should it be asked anyway.
func registerTTLWebhook(h *sdk.Handler, scope []sdk.BindingOption, failClosed bool) {
	opts := append(slices.Clone(scope), sdk.AnnotationPresent(annTTL),
		sdk.MatchCondition("has-ttl", fmt.Sprintf("has(object.metadata.annotations) && %q in object.metadata.annotations", annTTL)),
		sdk.Operations(sdk.OpCreate, sdk.OpUpdate), sdk.ID("validate-ttl"))
	if failClosed {
		opts = append(opts, sdk.Failure(sdk.FailClosed))
	}
	h.OnValidate(sdk.GVR("", "v1", "secrets"), reviewTTL, opts...)
}

// reviewTTL refuses the Secret when its ttl is not a positive duration.
func reviewTTL(_ context.Context, r *sdk.Review) error {
	if msg := checkTTL(r.Object.GetAnnotations()[annTTL]); msg != "" {
		return sdk.Deny(msg)
	}
	return nil
}

// checkTTL says what is wrong with a ttl annotation's value, for the
// client that wrote it; empty when it is a positive Go duration. Zero is
// refused too: the reaper would delete the Secret as soon as it saw it.
func checkTTL(s string) string {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %q is not a duration such as 1h or 30m", annTTL, s)
	case d <= 0:
		return fmt.Sprintf("%s: %q is not positive; the Secret would be deleted at once (use a duration such as 1h or 30m)", annTTL, s)
	}
	return ""
}
