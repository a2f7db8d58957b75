package sdktest_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/sdk/sdktest"
)

var widgets = sdk.GVR("test.tether.dev", "v1", "widgets")

func widget(name string, size int64, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": "ns", "uid": "uid-" + name},
		"spec":     map[string]any{"size": size},
	}}
	if labels != nil {
		u.SetLabels(labels)
	}
	return u
}

func TestLifecycleDeliveriesReachTheirFunctions(t *testing.T) {
	b := sdktest.New(t)
	h := sdk.New("widgets", b.Options()...)
	h.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
		ev.SetLabel("seen", "yes")
		ev.Record(sdk.Normal, "Seen", "a widget")
		ev.PatchStatus(map[string]any{"phase": "Ready"})
		ev.SetResult(map[string]any{"size": ev.Object().Object["spec"].(map[string]any)["size"]})
		return nil
	})
	var diff []sdk.Change
	h.OnUpdate(widgets, func(_ context.Context, ev *sdk.Event) error {
		diff = ev.Diff
		return sdk.RetryAfter(errors.New("not yet"), time.Minute)
	})
	h.OnDelete(widgets, func(_ context.Context, ev *sdk.Event) error {
		ev.RecordAbout(sdk.ObjectRef{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p"}, sdk.Warning, "Stuck", "cannot evict")
		return sdk.Permanent(errors.New("cannot clean up"))
	})
	b.Run(h)

	got := b.Create(widget("w", 3, nil))
	if got.Outcome != sdktest.OK || got.Binding != "create-0" {
		t.Fatalf("create: %v", got)
	}
	if l := got.Patch["metadata"].(map[string]any)["labels"].(map[string]any); l["seen"] != "yes" {
		t.Errorf("create patch %v, want the label", got.Patch)
	}
	if got.StatusPatch["phase"] != "Ready" || got.Result.(map[string]any)["size"] != float64(3) {
		t.Errorf("create status %v, result %v", got.StatusPatch, got.Result)
	}
	if want := []sdktest.Event{{Type: sdk.Normal, Reason: "Seen", Message: "a widget"}}; !reflect.DeepEqual(got.Events, want) {
		t.Errorf("create events %+v, want %+v", got.Events, want)
	}

	got = b.Update(widget("w", 3, nil), widget("w", 4, nil))
	if got.Outcome != sdktest.Retry || got.RetryAfter != time.Minute || got.Message != "not yet" {
		t.Errorf("update: %v, want a retry in 1m", got)
	}
	if len(diff) != 1 || strings.Join(diff[0].Path, ".") != "spec.size" {
		t.Errorf("update diff %+v, want spec.size", diff)
	}

	if got = b.Delete(widget("w", 4, nil)); got.Outcome != sdktest.Fail || !strings.Contains(got.Message, "cannot clean up") {
		t.Errorf("delete: %v, want a permanent failure", got)
	}
	pod := &sdk.ObjectRef{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p"}
	if want := []sdktest.Event{{Type: sdk.Warning, Reason: "Stuck", Message: "cannot evict", About: pod}}; !reflect.DeepEqual(got.Events, want) {
		t.Errorf("delete events %+v, want %+v", got.Events, want)
	}
}

func TestReviewsReachValidateAndMutate(t *testing.T) {
	b := sdktest.New(t)
	h := sdk.New("widgets", b.Options()...)
	h.OnValidate(widgets, func(_ context.Context, r *sdk.Review) error {
		if r.Object.GetLabels()["team"] == "" {
			return sdk.DenyWithCode(422, "a team label is required")
		}
		return nil
	})
	h.OnMutate(widgets, func(_ context.Context, r *sdk.Review) error {
		r.Object.SetLabels(map[string]string{"team": "default"})
		return nil
	})
	b.Run(h)

	if v := b.Validate(sdk.OpCreate, widget("w", 1, nil), nil); v.Allowed || v.Code != 422 || v.Message != "a team label is required" {
		t.Errorf("validate without a team: %+v", v)
	}
	if v := b.Validate(sdk.OpCreate, widget("w", 1, map[string]string{"team": "a"}), nil); !v.Allowed {
		t.Errorf("validate with a team: %+v", v)
	}
	v := b.Mutate(sdk.OpCreate, widget("w", 1, nil), nil)
	if !v.Allowed || !strings.Contains(string(v.Patch), `"team":"default"`) {
		t.Errorf("mutate: %+v, want a patch adding the label", v)
	}
}
