package lifecycle

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// TestAHandlersEventsArePostedAsTheHandler: the Events a create function
// records travel in its ack, and the broker posts them about the widget as
// the handler's own identity: the one whose RBAC allows events gets them,
// two identical ones counted into one Event as client-go's recorder does;
// the one whose RBAC does not is refused by the API server, and its patch
// lands all the same.
func TestAHandlersEventsArePostedAsTheHandler(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	var logged testenv.Lines
	s := startSecure(t, cp, func(o *broker.Options) {
		o.Log = hclog.New(&hclog.LoggerOptions{Name: "broker", Level: hclog.Debug, Output: io.MultiWriter(testenv.LogWriter(t, ""), &logged)})
	})
	objects := widgetRule("get", "list", "watch", "patch")
	eventRule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}
	s.grant(t, "poster", "poster", objects, eventRule, handlerRule("poster", "connect"))
	s.grant(t, "mute", "mute", objects, handlerRule("mute", "connect"))

	poster := s.handler("poster", s.token(t, "poster"))
	poster.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
		ev.Record(sdk.Normal, "Provisioned", "the widget is ready")
		ev.Record(sdk.Normal, "Provisioned", "the widget is ready")
		return nil
	}, sdk.Namespaces(s.ns), sdk.Fields("metadata.name=w"))
	runHandler(t, poster, s.addr)
	mute := s.handler("mute", s.token(t, "mute"))
	mute.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
		ev.Record(sdk.Warning, "Unheard", "no right to post this")
		ev.SetLabel("seen-by", "mute")
		return nil
	}, sdk.Namespaces(s.ns), sdk.Fields("metadata.name=m"))
	runHandler(t, mute, s.addr)

	create(t, dyn, widgetGVR, widget(s.ns, "w", nil))
	create(t, dyn, widgetGVR, widget(s.ns, "m", nil))

	eventually(t, "one Provisioned Event, counted twice", func() bool {
		for _, e := range events(t, cp, s.ns, "w") {
			if e.Reason == "Provisioned" && e.Count == 2 {
				if e.Type != "Normal" || e.Message != "the widget is ready" || e.InvolvedObject.Kind != "Widget" ||
					e.InvolvedObject.UID == "" || e.Source.Component != "poster" {
					t.Errorf("the Event is %+v", e)
				}
				return true
			}
		}
		return false
	})
	waitObject(t, dyn, widgetGVR, s.ns, "m", "labelled by mute", func(o *unstructured.Unstructured) bool {
		return o != nil && o.GetLabels()["seen-by"] == "mute"
	})
	refused := "system:serviceaccount:" + s.ns + ":mute"
	eventually(t, "the API server refusing mute's Event", func() bool {
		return logged.Any(func(l string) bool {
			return strings.Contains(l, "did not take a handler's Event") && strings.Contains(l, refused)
		})
	})
	for _, e := range events(t, cp, s.ns, "m") {
		if e.Reason == "Unheard" {
			t.Errorf("mute's Event was posted, though its RBAC does not allow it: %+v", e)
		}
	}
}
