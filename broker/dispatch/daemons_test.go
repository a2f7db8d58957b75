package dispatch

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// noted records the Events posted, as "reason: message".
type noted struct {
	mu     sync.Mutex
	events []string
}

func (n *noted) Event(_ *unstructured.Unstructured, _ bool, reason, message string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, reason+": "+message)
}

// TestADaemonsExitReportWritesWhatItsRunAsked: the patch, status patch and
// result a daemon's exit report carries are written as an OK ack's are,
// with the same checks; a report from an instance that does not run the
// daemon writes nothing.
func TestADaemonsExitReportWritesWhatItsRunAsked(t *testing.T) {
	widgets := resource.Resource{GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}}
	follow := &binding.Binding{ID: "follow", Kind: binding.Daemon, Resource: widgets,
		Results: binding.Results{Status: true, Key: "follow"}}
	running, other := &session.Instance{ID: "a"}, &session.Instance{ID: "b"}
	tests := []struct {
		name       string
		from       *session.Instance
		exit       *tetherv1.DaemonExited
		wantStatus map[string]any // nil: none
		wantEvent  string         // "": none
	}{
		{name: "a failed run's status patch and a result", from: running,
			exit:       &tetherv1.DaemonExited{Failed: true, Message: "not yet", StatusPatch: []byte(`{"message":"failed 1 times"}`), Result: []byte(`{"runs":1}`)},
			wantStatus: map[string]any{"message": "failed 1 times", "follow": map[string]any{"runs": int64(1)}},
			wantEvent:  "DaemonFailed"},
		{name: "status in the patch", from: running,
			exit:       &tetherv1.DaemonExited{Patch: []byte(`{"status":{"message":"finished"}}`)},
			wantStatus: map[string]any{"message": "finished"}},
		{name: "a patch of what handlers may not write", from: running,
			exit:      &tetherv1.DaemonExited{Patch: []byte(`{"metadata":{"finalizers":["x"]},"status":{"message":"m"}}`)},
			wantEvent: "InvalidPatch: daemon binding \"follow\" of handler \"h\": patch: metadata.finalizers cannot be patched"},
		{name: "a report from an instance that does not run it", from: other,
			exit: &tetherv1.DaemonExited{StatusPatch: []byte(`{"message":"m"}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(),
				map[schema.GroupVersionResource]string{widgets.GroupVersionResource: "WidgetList"}, widget("1"))
			rec := &noted{}
			h := newHandler(&Options{Client: client, WriteLimiter: NewWriteLimiter(100, 100), Recorder: rec,
				Clock: clocktesting.NewFakeClock(time.Now())}, hclog.NewNullLogger(), "h", []*binding.Binding{follow})
			ds := &daemons{handler: h}
			tt.exit.BindingId, tt.exit.Uid = "follow", "x"
			o := &object{work: &objectWork{}, uid: "x", res: &widgets, cur: cached(t, widget("1")),
				observed: observed{daemons: map[string]*daemon{"follow": {inst: running}}, exits: []daemonExit{{inst: tt.from, msg: tt.exit}}}}
			if wait, err := ds.takeExits(context.Background(), o); wait > 0 || err != nil {
				t.Fatalf("takeExits: wait %v, err %v", wait, err)
			}
			got, err := client.Resource(widgets.GroupVersionResource).Namespace("ns").Get(context.Background(), "w", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			status, _, _ := unstructured.NestedMap(got.Object, "status")
			if !reflect.DeepEqual(status, tt.wantStatus) {
				t.Errorf("status = %v, want %v", status, tt.wantStatus)
			}
			if len(got.GetFinalizers()) > 0 {
				t.Errorf("finalizers written: %v", got.GetFinalizers())
			}
			events := strings.Join(rec.events, "\n")
			if (tt.wantEvent == "") != (events == "") || !strings.Contains(events, tt.wantEvent) {
				t.Errorf("events %q, want one containing %q", events, tt.wantEvent)
			}
		})
	}
}
