package dispatch

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/resource"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func TestKindLabel(t *testing.T) {
	for k, want := range map[tetherv1.DeliveryKind]string{
		tetherv1.DeliveryKind_DELIVERY_KIND_CREATE:       "create",
		tetherv1.DeliveryKind_DELIVERY_KIND_TICK:         "tick",
		tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START: "daemon-start",
		tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_STOP:  "daemon-stop",
	} {
		if got := kindLabel(k); got != want {
			t.Errorf("kindLabel(%v) = %q, want %q", k, got, want)
		}
	}
}

func TestResourceLabel(t *testing.T) {
	var widgets, secrets resource.Resource
	widgets.Group, widgets.Resource = "test.tether.dev", "widgets"
	secrets.Resource = "secrets"
	if got := resourceLabel(widgets); got != "widgets.test.tether.dev" {
		t.Errorf("widgets: %q", got)
	}
	if got := resourceLabel(secrets); got != "secrets" {
		t.Errorf("secrets: %q", got)
	}
}

func TestReleaseReasons(t *testing.T) {
	live := &unstructured.Unstructured{Object: map[string]any{}}
	deleting := &unstructured.Unstructured{Object: map[string]any{}}
	now := metav1.Now()
	deleting.SetDeletionTimestamp(&now)

	if got := releaseReason(&write{removeHold: true}, live); got != metrics.ReleaseNoLongerMatching {
		t.Errorf("live: %q", got)
	}
	if got := releaseReason(&write{removeHold: true}, deleting); got != metrics.ReleaseDone {
		t.Errorf("deleting: %q", got)
	}
	if got := releaseReason(&write{removeHold: true, release: absentRelease(deleting)}, deleting); got != metrics.ReleaseAbsent {
		t.Errorf("absent: %q", got)
	}
	if got := releaseReason(&write{removeHold: true, release: absentRelease(live)}, live); got != metrics.ReleaseLongAbsent {
		t.Errorf("long absent: %q", got)
	}

	o := &object{}
	daemonStopTimedOut(o, live) // stopped for another reason: not a release
	if got := deletionRelease(o); got != metrics.ReleaseDone {
		t.Errorf("after a timeout on a live object: %q", got)
	}
	daemonStopTimedOut(o, deleting)
	if got := deletionRelease(o); got != metrics.ReleaseDaemonTimeout {
		t.Errorf("after a timeout while deleting: %q", got)
	}
}
