package sdk_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tether-dev/tether/sdk"
)

// A handler that gives every new ConfigMap labelled app=web an owner label,
// reports on the status of Deployments, cleans up before a Secret goes,
// checks Certificates every hour and follows the logs of every Job.
func Example() {
	h := sdk.New("web-janitor", sdk.WithTokenFile("/var/run/secrets/tokens/tether"), sdk.WithWindow(8))

	configMaps := sdk.GVR("", "v1", "configmaps")
	h.OnCreate(configMaps, func(ctx context.Context, ev *sdk.Event) error {
		ev.SetLabel("example.com/owner", "web-team")
		ev.SetResult(map[string]string{"labelled": ev.Name})
		return nil
	}, sdk.Labels("app=web"))

	h.OnField(sdk.GVR("apps", "v1", "deployments"), "spec.replicas", func(ctx context.Context, ev *sdk.Event) error {
		if ev.FieldNew == nil {
			return sdk.Permanent(fmt.Errorf("replicas removed from %s/%s", ev.Namespace, ev.Name))
		}
		ev.PatchStatus(map[string]any{"observedReplicas": ev.FieldNew})
		return nil
	}, sdk.ID("replicas"), sdk.When("object.spec.replicas > 0"))

	h.OnDelete(sdk.GVK("", "v1", "Secret"), func(ctx context.Context, ev *sdk.Event) error {
		if err := deleteCloudCopy(ctx, ev.UID); err != nil {
			return sdk.RetryAfter(err, 30*time.Second)
		}
		return nil
	}, sdk.Finalizer(sdk.FinalizerStrict), sdk.AnnotationPresent("example.com/cloud-copy"))

	h.OnTimer(sdk.GVR("cert-manager.io", "v1", "certificates"), time.Hour, func(ctx context.Context, ev *sdk.Event) error {
		late := time.Since(ev.Scheduled)
		ev.PatchStatus(map[string]any{"lastCheckLateness": late.String()})
		return nil
	}, sdk.Sharp(), sdk.InitialDelay(time.Minute), sdk.Finalizer(sdk.FinalizerNone))

	h.OnDaemon(sdk.GVR("batch", "v1", "jobs"), func(ctx context.Context, ev *sdk.Event) error {
		return followLogs(ctx, ev.Namespace, ev.Name) // returns when ctx ends
	}, sdk.Restart(), sdk.CancellationTimeout(20*time.Second))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := h.Run(ctx, "tether-broker.tether-system.svc:7443"); err != nil {
		log.Fatal(err)
	}
}

func deleteCloudCopy(context.Context, string) error { return nil }

func followLogs(ctx context.Context, namespace, name string) error {
	<-ctx.Done()
	return ctx.Err()
}
