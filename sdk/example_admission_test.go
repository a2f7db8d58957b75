package sdk_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/sdk"
)

// A validating webhook that refuses Secrets without an owner, and warns
// about the ones that still use a deprecated key. The handler serves no
// HTTPS: the broker does, and forwards each review.
func ExampleHandler_OnValidate() {
	h := sdk.New("secret-policy", sdk.WithTokenFile("/var/run/secrets/tokens/tether"))

	h.OnValidate(sdk.GVR("", "v1", "secrets"), func(ctx context.Context, r *sdk.Review) error {
		owner := r.Object.GetAnnotations()["example.com/owner"]
		if owner == "" {
			return sdk.Deny("the annotation example.com/owner is required")
		}
		if r.Operation == sdk.OpUpdate && r.OldObject.GetAnnotations()["example.com/owner"] != owner {
			return sdk.DenyWithCode(409, fmt.Sprintf("%s/%s belongs to %s", r.Namespace, r.Name,
				r.OldObject.GetAnnotations()["example.com/owner"]))
		}
		if _, found, _ := unstructured.NestedString(r.Object.Object, "data", "token"); found {
			r.Warn("data.token is deprecated; use data.apiKey")
		}
		return nil
	},
		sdk.Operations(sdk.OpCreate, sdk.OpUpdate),
		sdk.NamespaceSelector("example.com/policy=enforced"),
		sdk.MatchCondition("not-system", `!request.userInfo.username.startsWith("system:")`),
		sdk.Failure(sdk.FailClosed),
		sdk.Timeout(5*time.Second))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := h.Run(ctx, "tether-broker.tether-system.svc:7443"); err != nil {
		log.Fatal(err)
	}
}

// A mutating webhook that labels every new ConfigMap with its team and
// drops a forbidden key. The function changes the object in place; the SDK
// answers with the JSON patch.
func ExampleHandler_OnMutate() {
	h := sdk.New("configmap-defaults", sdk.WithTokenFile("/var/run/secrets/tokens/tether"))

	h.OnMutate(sdk.GVR("", "v1", "configmaps"), func(ctx context.Context, r *sdk.Review) error {
		labels := r.Object.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		if labels["example.com/team"] == "" {
			labels["example.com/team"] = teamOf(r.UserGroups)
			r.Object.SetLabels(labels)
		}
		if data, ok := r.Object.Object["data"].(map[string]any); ok {
			delete(data, "password")
		}
		if r.DryRun {
			return nil // NoSideEffectsOnDryRun: record nothing for a dry run
		}
		return recordDefaulted(ctx, r.Namespace, r.Name)
	}, sdk.Operations(sdk.OpCreate), sdk.NoSideEffectsOnDryRun(), sdk.Labels("example.com/defaults!=off"))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := h.Run(ctx, "tether-broker.tether-system.svc:7443"); err != nil {
		log.Fatal(err)
	}
}

func teamOf(groups []string) string {
	for _, g := range groups {
		if g != "system:authenticated" {
			return g
		}
	}
	return "unknown"
}

func recordDefaulted(context.Context, string, string) error { return nil }
