package sdktest

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/progress"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// Outcome is how the function ended.
type Outcome string

// The outcomes.
const (
	OK    Outcome = "OK"    // returned nil
	Retry Outcome = "RETRY" // a temporary error: the broker would try again
	Fail  Outcome = "FAIL"  // a permanent error (or a panic)
)

// Result is what the function answered to one delivery.
type Result struct {
	// Binding is the id of the binding delivered to.
	Binding string
	Outcome Outcome
	// Message is the error's text, for Retry and Fail.
	Message string
	// RetryAfter is the delay a temporary error asked for; zero: the
	// binding's backoff.
	RetryAfter time.Duration
	// Patch is the merge patch the function asked for on the object
	// (labels, annotations, spec...), StatusPatch the one on its status,
	// and Result what it stored with SetResult, decoded from JSON. Nil
	// when it asked for none.
	Patch, StatusPatch map[string]any
	Result             any
	// Events are the Kubernetes Events the function recorded, whatever
	// its outcome.
	Events []Event
}

// Event is a Kubernetes Event a function recorded (Event.Record and
// RecordAbout). About is nil for one about the delivery's object.
type Event struct {
	Type            sdk.EventType
	Reason, Message string
	About           *sdk.ObjectRef
}

// Create delivers the creation of obj to the handler's create binding for
// obj's resource, and returns the answer. The test fails when the handler
// has no such binding, or several (use DeliverTo).
func (b *Broker) Create(obj *unstructured.Unstructured) Result {
	b.t.Helper()
	return b.DeliverTo(b.binding(tetherv1.BindingKind_BINDING_KIND_CREATE, obj), obj, nil)
}

// Update delivers the change of old into obj, with its diff.
func (b *Broker) Update(old, obj *unstructured.Unstructured) Result {
	b.t.Helper()
	return b.DeliverTo(b.binding(tetherv1.BindingKind_BINDING_KIND_UPDATE, obj), obj, old)
}

// Delete delivers the deletion of obj.
func (b *Broker) Delete(obj *unstructured.Unstructured) Result {
	b.t.Helper()
	return b.DeliverTo(b.binding(tetherv1.BindingKind_BINDING_KIND_DELETE, obj), obj, nil)
}

// Resume delivers obj as found when the handler (re)starts.
func (b *Broker) Resume(obj *unstructured.Unstructured) Result {
	b.t.Helper()
	return b.DeliverTo(b.binding(tetherv1.BindingKind_BINDING_KIND_RESUME, obj), obj, nil)
}

// Tick delivers one tick of the handler's timer for obj.
func (b *Broker) Tick(obj *unstructured.Unstructured) Result {
	b.t.Helper()
	return b.DeliverTo(b.binding(tetherv1.BindingKind_BINDING_KIND_TIMER, obj), obj, nil)
}

// DeliverTo delivers obj (and old, for an update) to the binding with the
// given id, as the broker would for that binding's kind.
func (b *Broker) DeliverTo(bindingID string, obj, old *unstructured.Unstructured) Result {
	b.t.Helper()
	pb := b.bindingByID(bindingID)
	kind, ok := deliveryKinds[pb.GetKind()]
	if !ok {
		b.t.Fatalf("sdktest: binding %q is a %v binding; use Validate or Mutate for admission", bindingID, pb.GetKind())
	}
	d := &tetherv1.Delivery{Kind: kind, BindingId: bindingID, Attempt: 1, Object: encode(b.t, obj),
		Ref: ref(pb, obj), Deadline: timestamppb.New(time.Now().Add(Timeout))}
	switch kind {
	case tetherv1.DeliveryKind_DELIVERY_KIND_UPDATE:
		if old == nil {
			b.t.Fatalf("sdktest: an update of %s needs the old object", obj.GetName())
		}
		d.OldObject = encode(b.t, old)
		d.Diff = progress.DiffProto(progress.Diff(progress.Essence(old.Object), progress.Essence(obj.Object)))
	case tetherv1.DeliveryKind_DELIVERY_KIND_TICK:
		d.Scheduled = timestamppb.Now()
	}
	ack, err := b.deliver(d)
	if err != nil {
		b.t.Fatalf("sdktest: delivering %s of %s to %q: %v", kind, obj.GetName(), bindingID, err)
	}
	return result(b.t, bindingID, ack)
}

// deliveryKinds are the delivery kinds of the lifecycle bindings.
var deliveryKinds = map[tetherv1.BindingKind]tetherv1.DeliveryKind{
	tetherv1.BindingKind_BINDING_KIND_CREATE: tetherv1.DeliveryKind_DELIVERY_KIND_CREATE,
	tetherv1.BindingKind_BINDING_KIND_UPDATE: tetherv1.DeliveryKind_DELIVERY_KIND_UPDATE,
	tetherv1.BindingKind_BINDING_KIND_DELETE: tetherv1.DeliveryKind_DELIVERY_KIND_DELETE,
	tetherv1.BindingKind_BINDING_KIND_RESUME: tetherv1.DeliveryKind_DELIVERY_KIND_RESUME,
	tetherv1.BindingKind_BINDING_KIND_TIMER:  tetherv1.DeliveryKind_DELIVERY_KIND_TICK,
	tetherv1.BindingKind_BINDING_KIND_EVENT:  tetherv1.DeliveryKind_DELIVERY_KIND_EVENT,
}

// binding is the id of the one binding of kind whose resource is obj's.
func (b *Broker) binding(kind tetherv1.BindingKind, obj *unstructured.Unstructured) string {
	b.t.Helper()
	gvk := obj.GroupVersionKind()
	var ids []string
	for _, pb := range b.Bindings() {
		if pb.GetKind() == kind && matches(pb.GetResource(), gvk) {
			ids = append(ids, pb.GetId())
		}
	}
	if len(ids) != 1 {
		b.t.Fatalf("sdktest: the handler has %d %v bindings for %s (%q); name one with DeliverTo", len(ids), kind, gvk, ids)
	}
	return ids[0]
}

func (b *Broker) bindingByID(id string) *tetherv1.Binding {
	b.t.Helper()
	for _, pb := range b.Bindings() {
		if pb.GetId() == id {
			return pb
		}
	}
	b.t.Fatalf("sdktest: the handler has no binding %q", id)
	return nil
}

// matches reports whether a binding's resource is gvk's: by kind when the
// binding names one, else by the plural the API server would use.
func matches(r *tetherv1.Resource, gvk schema.GroupVersionKind) bool {
	if r.GetGroup() != gvk.Group || r.GetVersion() != gvk.Version {
		return false
	}
	if r.GetKind() != "" {
		return r.GetKind() == gvk.Kind
	}
	plural := strings.ToLower(gvk.Kind)
	switch {
	case strings.HasSuffix(plural, "s"), strings.HasSuffix(plural, "x"), strings.HasSuffix(plural, "ch"), strings.HasSuffix(plural, "sh"):
		plural += "es"
	case strings.HasSuffix(plural, "y") && !strings.HasSuffix(plural, "ey"):
		plural = plural[:len(plural)-1] + "ies"
	default:
		plural += "s"
	}
	return r.GetResource() == plural
}

func ref(pb *tetherv1.Binding, obj *unstructured.Unstructured) *tetherv1.ObjectRef {
	r := pb.GetResource()
	return &tetherv1.ObjectRef{
		Resource:  &tetherv1.Resource{Group: r.GetGroup(), Version: r.GetVersion(), Resource: r.GetResource(), Kind: obj.GetKind(), Namespaced: obj.GetNamespace() != ""},
		Namespace: obj.GetNamespace(), Name: obj.GetName(), Uid: string(obj.GetUID()), ResourceVersion: obj.GetResourceVersion(),
	}
}

func encode(t interface{ Fatalf(string, ...any) }, obj *unstructured.Unstructured) []byte {
	data, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatalf("sdktest: encoding %s: %v", obj.GetName(), err)
	}
	return data
}

// result turns an ack into a Result.
func result(t interface{ Fatalf(string, ...any) }, bindingID string, ack *tetherv1.Ack) Result {
	r := Result{Binding: bindingID, Message: ack.GetMessage(), RetryAfter: ack.GetRetryAfter().AsDuration()}
	switch ack.GetOutcome() {
	case tetherv1.Outcome_OUTCOME_OK:
		r.Outcome = OK
	case tetherv1.Outcome_OUTCOME_RETRY:
		r.Outcome = Retry
	default:
		r.Outcome = Fail
	}
	for _, part := range []struct {
		raw []byte
		to  any
	}{{ack.GetPatch(), &r.Patch}, {ack.GetStatusPatch(), &r.StatusPatch}, {ack.GetResult(), &r.Result}} {
		if len(part.raw) == 0 {
			continue
		}
		if err := json.Unmarshal(part.raw, part.to); err != nil {
			t.Fatalf("sdktest: the handler's answer to %q is not JSON: %v", bindingID, err)
		}
	}
	for _, e := range ack.GetEvents() {
		ev := Event{Type: sdk.Normal, Reason: e.GetReason(), Message: e.GetMessage()}
		if e.GetType() == tetherv1.HandlerEvent_TYPE_WARNING {
			ev.Type = sdk.Warning
		}
		if a := e.GetRegarding(); a != nil {
			ev.About = &sdk.ObjectRef{APIVersion: a.GetApiVersion(), Kind: a.GetKind(), Namespace: a.GetNamespace(), Name: a.GetName(), UID: a.GetUid()}
		}
		r.Events = append(r.Events, ev)
	}
	return r
}

// String shows a Result in test failures.
func (r Result) String() string {
	return fmt.Sprintf("%s from %q: %q patch=%v status=%v result=%v", r.Outcome, r.Binding, r.Message, r.Patch, r.StatusPatch, r.Result)
}
