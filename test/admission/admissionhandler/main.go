// Command admissionhandler is the handler the admission end-to-end tests
// run as a real process, so that they can kill it. It validates Secrets
// (the annotation example.tether.dev/owner is required) and labels
// ConfigMaps (tether.dev/mutated=true), both in one namespace, and prints
// one line per review to stdout ("VALIDATE ns/name OPERATION instance",
// "MUTATE ns/name").
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/sdk"
)

// OwnerAnnotation is the annotation the validating binding requires.
const OwnerAnnotation = "example.tether.dev/owner"

func main() {
	addr := flag.String("broker", "127.0.0.1:7443", "broker address")
	name := flag.String("name", "admission", "handler name")
	ns := flag.String("namespace", "", "the namespace whose Secrets and ConfigMaps are reviewed (required)")
	grace := flag.Duration("grace", 0, "the handler's grace (0: the broker's default)")
	sleep := flag.Duration("sleep", 0, "how long each validation takes (past the timeout: the failure policy decides)")
	timeout := flag.Duration("timeout", 0, "the webhooks' timeout (0: the broker's default, 10s)")
	failClosed := flag.Bool("fail-closed", false, "failure policy Fail instead of Ignore")
	strict := flag.Bool("strict", false, "finalizer STRICT: the validating webhook stays, failing closed, while the handler is absent")
	instance := flag.String("instance", "", "instance id (default: the SDK's); printed after each VALIDATE line")
	flag.Parse()
	if *ns == "" {
		fmt.Fprintln(os.Stderr, "admissionhandler: --namespace is required")
		os.Exit(2)
	}

	opts := []sdk.Option{sdk.WithInsecure(), sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: *name, Output: os.Stderr}))}
	if *grace > 0 {
		opts = append(opts, sdk.WithGrace(*grace))
	}
	if *instance != "" {
		opts = append(opts, sdk.WithInstanceID(*instance))
	}
	h := sdk.New(*name, opts...)
	common := []sdk.BindingOption{sdk.Namespaces(*ns)}
	if *timeout > 0 {
		common = append(common, sdk.Timeout(*timeout))
	}
	if *failClosed {
		common = append(common, sdk.Failure(sdk.FailClosed))
	}
	validateOpts := common
	if *strict {
		validateOpts = append(validateOpts, sdk.Finalizer(sdk.FinalizerStrict))
	}

	h.OnValidate(sdk.GVR("", "v1", "secrets"), func(ctx context.Context, r *sdk.Review) error {
		fmt.Printf("VALIDATE %s/%s %s %s\n", r.Namespace, r.Name, r.Operation, *instance)
		if *sleep > 0 {
			select {
			case <-time.After(*sleep):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if r.Object.GetAnnotations()[OwnerAnnotation] == "" {
			return sdk.Deny(fmt.Sprintf("the annotation %s is required", OwnerAnnotation))
		}
		return nil
	}, append(validateOpts, sdk.ID("owner-required"))...)

	h.OnMutate(sdk.GVR("", "v1", "configmaps"), func(_ context.Context, r *sdk.Review) error {
		fmt.Printf("MUTATE %s/%s\n", r.Namespace, r.Name)
		labels := r.Object.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["tether.dev/mutated"] = "true"
		r.Object.SetLabels(labels)
		r.Warn("labelled by the admission test handler")
		return nil
	}, append(common, sdk.ID("label"))...)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := h.Run(ctx, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "admissionhandler:", err)
		os.Exit(1)
	}
}
