package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// EventKind is why a handler function is called.
type EventKind int

// The event kinds. Each On* registration receives events of its own kind.
const (
	Create EventKind = iota + 1
	Update
	Delete
	Resume
	Field
	// Watch is a raw watch event, for OnEvent bindings.
	Watch
	// Tick is a timer tick, for OnTimer bindings.
	Tick
	// DaemonStart is what a daemon function (OnDaemon) sees: the delivery
	// that started it.
	DaemonStart
	// Validate and Mutate are the kinds of OnValidate and OnMutate
	// bindings, whose functions see a *Review instead of an *Event.
	Validate
	Mutate
)

func (k EventKind) String() string {
	switch k {
	case Create:
		return "create"
	case Update:
		return "update"
	case Delete:
		return "delete"
	case Resume:
		return "resume"
	case Field:
		return "field"
	case Watch:
		return "watch"
	case Tick:
		return "tick"
	case DaemonStart:
		return "daemon-start"
	case Validate:
		return "validate"
	case Mutate:
		return "mutate"
	default:
		return fmt.Sprintf("EventKind(%d)", int(k))
	}
}

// bindingName is the name of the kind's bindings, in default binding ids
// and in messages.
func (k EventKind) bindingName() string {
	switch k {
	case Watch:
		return "event"
	case Tick:
		return "timer"
	case DaemonStart:
		return "daemon"
	default:
		return k.String()
	}
}

// special tells whether the kind's bindings take only their own delivery
// kinds (and those kinds go to no other bindings).
func (k EventKind) special() bool {
	return k == Tick || k == DaemonStart || k.admission()
}

// admission tells whether the kind's bindings answer admission reviews.
func (k EventKind) admission() bool {
	return k == Validate || k == Mutate
}

// mayHold tells whether bindings of the kind may hold objects with a
// finalizer.
func (k EventKind) mayHold() bool {
	return k == Delete || k == Tick || k == DaemonStart
}

func (k EventKind) bindingKind() tetherv1.BindingKind {
	switch k {
	case Create:
		return tetherv1.BindingKind_BINDING_KIND_CREATE
	case Update:
		return tetherv1.BindingKind_BINDING_KIND_UPDATE
	case Delete:
		return tetherv1.BindingKind_BINDING_KIND_DELETE
	case Resume:
		return tetherv1.BindingKind_BINDING_KIND_RESUME
	case Field:
		return tetherv1.BindingKind_BINDING_KIND_FIELD
	case Watch:
		return tetherv1.BindingKind_BINDING_KIND_EVENT
	case Tick:
		return tetherv1.BindingKind_BINDING_KIND_TIMER
	case DaemonStart:
		return tetherv1.BindingKind_BINDING_KIND_DAEMON
	case Validate:
		return tetherv1.BindingKind_BINDING_KIND_VALIDATE
	case Mutate:
		return tetherv1.BindingKind_BINDING_KIND_MUTATE
	default:
		return tetherv1.BindingKind_BINDING_KIND_UNSPECIFIED
	}
}

// eventKind maps the delivery kinds this SDK handles to the kind of binding
// that takes them (DAEMON_START and DAEMON_STOP both go to daemon bindings;
// ADMISSION to validate and mutate bindings, and accept narrows it to the
// binding's kind); ok is false for the others, which are acked FAIL.
func eventKind(k tetherv1.DeliveryKind) (kind EventKind, ok bool) {
	switch k {
	case tetherv1.DeliveryKind_DELIVERY_KIND_CREATE:
		return Create, true
	case tetherv1.DeliveryKind_DELIVERY_KIND_UPDATE:
		return Update, true
	case tetherv1.DeliveryKind_DELIVERY_KIND_DELETE:
		return Delete, true
	case tetherv1.DeliveryKind_DELIVERY_KIND_RESUME:
		return Resume, true
	case tetherv1.DeliveryKind_DELIVERY_KIND_FIELD:
		return Field, true
	case tetherv1.DeliveryKind_DELIVERY_KIND_EVENT:
		return Watch, true
	case tetherv1.DeliveryKind_DELIVERY_KIND_TICK:
		return Tick, true
	case tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START, tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_STOP:
		return DaemonStart, true
	case tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION:
		return Validate, true
	default:
		return 0, false
	}
}

// Change is one difference between Event.Old and Event.Object.
type Change struct {
	// Op is "add", "change" or "remove".
	Op string
	// Path is the field path, e.g. ["spec", "replicas"].
	Path []string
	// Old and New are the values on each side, nil where absent. Numbers
	// are int64 or float64, as in unstructured objects.
	Old, New any
}

// Event is one delivery, as a handler function sees it. The fields are
// read-only; the methods collect the patches and the result that are sent
// back when the function returns nil. The methods are safe for concurrent
// use. A daemon's patches and result are sent when it returns or fails by
// itself (DaemonExited), whatever it returned; its Kubernetes Events are
// ignored.
type Event struct {
	Kind EventKind
	// ID is the delivery id, unique per broker process.
	ID string
	// Binding is the id of the binding that matched.
	Binding string
	// Attempt counts from 1.
	Attempt  int
	Resource Resource
	// Namespace is empty for cluster-scoped objects.
	Namespace, Name, UID, ResourceVersion string
	// Deadline is when the broker stops waiting for the ack (zero if none,
	// and for daemons).
	Deadline time.Time
	// Scheduled is when a Tick was due; the difference to its arrival is the
	// tick's lateness. Zero for other kinds.
	Scheduled time.Time
	// Diff lists the changes from Old to Object, for Update and Field.
	Diff []Change
	// FieldOld and FieldNew are the values at the binding's field path,
	// for Field; nil where the field is absent.
	FieldOld, FieldNew any
	// WatchType is "ADDED", "MODIFIED" or "DELETED", for Watch.
	WatchType string

	log hclog.Logger
	// daemon events ignore Kubernetes Events (Record).
	daemon bool
	// object and old are decoded when the function first asks for them:
	// one that only acks (a tick, say) never pays for it.
	object, old lazyObject

	ignoredOnce sync.Once

	mu          sync.Mutex
	patch       map[string]any
	statusPatch map[string]any
	result      json.RawMessage
	resultErr   error
	events      []*tetherv1.HandlerEvent
}

// Object is the object as the broker saw it, decoded from the delivery's
// JSON the first time it is asked for; later calls return the same value.
func (e *Event) Object() *unstructured.Unstructured { return e.object.get() }

// Old is the object's essence when the handler last finished with it
// (top-level fields but status; metadata narrowed to labels and
// annotations), for Update and Field; nil otherwise. Decoded like Object.
func (e *Event) Old() *unstructured.Unstructured { return e.old.get() }

// RawObject is the object's JSON as delivered, for decoding into a type of
// the handler's own (json.Unmarshal(ev.RawObject(), &widget)) without the
// unstructured form. It must not be changed.
func (e *Event) RawObject() []byte { return e.object.raw }

// NewEvent makes an event of kind for obj, with its namespace, name, UID
// and resourceVersion, for tests that call a handler function directly;
// sdktest delivers through a fake broker instead.
func NewEvent(kind EventKind, obj *unstructured.Unstructured) *Event {
	ev := &Event{Kind: kind}
	if obj != nil {
		ev.Namespace, ev.Name, ev.UID, ev.ResourceVersion = obj.GetNamespace(), obj.GetName(), string(obj.GetUID()), obj.GetResourceVersion()
		ev.object.raw, _ = json.Marshal(obj.Object)
		ev.object.once.Do(func() { ev.object.u = obj })
	}
	return ev
}

// lazyObject is an object's JSON, decoded once when first asked for.
type lazyObject struct {
	raw  []byte
	once sync.Once
	u    *unstructured.Unstructured
}

func (l *lazyObject) get() *unstructured.Unstructured {
	l.once.Do(func() {
		// checkObject passed raw when the event was made, so it decodes.
		l.u, _ = decodeObject(l.raw)
	})
	return l.u
}

// Logger returns a logger that names the handler, binding, delivery and
// object.
func (e *Event) Logger() hclog.Logger {
	if e.log == nil {
		return hclog.NewNullLogger()
	}
	return e.log
}

// SetLabel sets label k to v on the object.
func (e *Event) SetLabel(k, v string) { e.Patch(metaPatch("labels", k, v)) }

// RemoveLabel removes label k from the object.
func (e *Event) RemoveLabel(k string) { e.Patch(metaPatch("labels", k, nil)) }

// SetAnnotation sets annotation k to v on the object.
func (e *Event) SetAnnotation(k, v string) { e.Patch(metaPatch("annotations", k, v)) }

// RemoveAnnotation removes annotation k from the object.
func (e *Event) RemoveAnnotation(k string) { e.Patch(metaPatch("annotations", k, nil)) }

func metaPatch(field, k string, v any) map[string]any {
	return map[string]any{"metadata": map[string]any{field: map[string]any{k: v}}}
}

// Patch merges a JSON merge patch (RFC 7386) into the patch for the object,
// e.g. {"spec": {"paused": true}}; a nil value removes the field. Calls
// accumulate: later values win. The status subresource is patched with
// PatchStatus instead.
func (e *Event) Patch(mergePatch map[string]any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.patch = mergeInto(e.patch, mergePatch)
}

// PatchStatus merges a JSON merge patch into the patch for the status
// subresource, given without the "status" key: {"phase": "Ready"}.
func (e *Event) PatchStatus(mergePatch map[string]any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.statusPatch = mergeInto(e.statusPatch, mergePatch)
}

// SetResult records v, encoded as JSON, as the result the broker stores on
// the object for this binding: in its annotation, or in status with
// ResultsInStatus. A value that cannot be encoded, or whose JSON is larger
// than 16 KiB (annotations are small), makes the delivery fail permanently.
func (e *Event) SetResult(v any) {
	raw, err := json.Marshal(v)
	if err == nil && len(raw) > tetherv1.MaxResultBytes {
		err = fmt.Errorf("the result is %d bytes of JSON, more than the %d the broker stores", len(raw), tetherv1.MaxResultBytes)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.result, e.resultErr = raw, err
}

// ignore tells whether the event drops Kubernetes Events (a daemon's
// event), warning of the first one dropped: the function meant to post it.
func (e *Event) ignore(method string) bool {
	if !e.daemon {
		return false
	}
	e.ignoredOnce.Do(func() {
		e.Logger().Warn("ignoring Kubernetes Events recorded by a daemon: its exit report carries none; "+
			"record them from a timer", "method", method)
	})
	return true
}

// mergeInto composes patch src onto dst (which it may modify and returns):
// objects merge key by key, anything else replaces, and nulls are kept so
// that they still delete when the patch is applied.
func mergeInto(dst, src map[string]any) map[string]any {
	if dst == nil {
		dst = make(map[string]any, len(src))
	}
	for k, v := range src {
		sv, srcIsMap := v.(map[string]any)
		dv, dstIsMap := dst[k].(map[string]any)
		switch {
		case srcIsMap && dstIsMap:
			dst[k] = mergeInto(dv, sv)
		case srcIsMap:
			dst[k] = mergeInto(nil, sv)
		default:
			dst[k] = copyJSON(v)
		}
	}
	return dst
}

// copyJSON copies maps and slices so later changes by the caller do not
// leak into the patch.
func copyJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return mergeInto(nil, t)
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = copyJSON(x)
		}
		return out
	default:
		return v
	}
}

// wrote tells whether the function left patches or a result on the event.
func (e *Event) wrote() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.patch) > 0 || len(e.statusPatch) > 0 || e.result != nil || e.resultErr != nil
}

// encode puts what the function left on the event into an OK ack.
func (e *Event) encode(ack *tetherv1.Ack) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.resultErr != nil {
		return fmt.Errorf("encoding result: %w", e.resultErr)
	}
	ack.Result = e.result
	var err error
	if len(e.patch) > 0 {
		if ack.Patch, err = json.Marshal(e.patch); err != nil {
			return fmt.Errorf("encoding patch: %w", err)
		}
	}
	if len(e.statusPatch) > 0 {
		if ack.StatusPatch, err = json.Marshal(e.statusPatch); err != nil {
			return fmt.Errorf("encoding status patch: %w", err)
		}
	}
	return nil
}

// newEvent decodes a delivery. kind has been checked by the caller.
func newEvent(d *tetherv1.Delivery, kind EventKind, log hclog.Logger) (*Event, error) {
	ev := &Event{
		Kind:      kind,
		ID:        d.GetId(),
		Binding:   d.GetBindingId(),
		Attempt:   int(d.GetAttempt()),
		WatchType: d.GetEventType(),
		log:       log,
	}
	if ref := d.GetRef(); ref != nil {
		r := ref.GetResource()
		ev.Resource = Resource{Group: r.GetGroup(), Version: r.GetVersion(), Resource: r.GetResource(), Kind: r.GetKind()}
		ev.Namespace, ev.Name, ev.UID, ev.ResourceVersion = ref.GetNamespace(), ref.GetName(), ref.GetUid(), ref.GetResourceVersion()
	}
	if d.GetDeadline() != nil {
		ev.Deadline = d.GetDeadline().AsTime()
	}
	if d.GetScheduled() != nil {
		ev.Scheduled = d.GetScheduled().AsTime()
	}
	if err := checkObject(d.GetObject()); err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	if err := checkObject(d.GetOldObject()); err != nil {
		return nil, fmt.Errorf("old object: %w", err)
	}
	ev.object.raw, ev.old.raw = d.GetObject(), d.GetOldObject()
	var err error
	if ev.FieldOld, err = decodeValue(d.GetFieldOld()); err != nil {
		return nil, fmt.Errorf("field old value: %w", err)
	}
	if ev.FieldNew, err = decodeValue(d.GetFieldNew()); err != nil {
		return nil, fmt.Errorf("field new value: %w", err)
	}
	for i, entry := range d.GetDiff() {
		c := Change{Op: diffOp(entry.GetOperation()), Path: entry.GetPath()}
		if c.Old, err = decodeValue(entry.GetOldValue()); err != nil {
			return nil, fmt.Errorf("diff %d old value: %w", i, err)
		}
		if c.New, err = decodeValue(entry.GetNewValue()); err != nil {
			return nil, fmt.Errorf("diff %d new value: %w", i, err)
		}
		ev.Diff = append(ev.Diff, c)
	}
	return ev, nil
}

func diffOp(op tetherv1.DiffEntry_Operation) string {
	switch op {
	case tetherv1.DiffEntry_OPERATION_ADD:
		return "add"
	case tetherv1.DiffEntry_OPERATION_CHANGE:
		return "change"
	case tetherv1.DiffEntry_OPERATION_REMOVE:
		return "remove"
	default:
		return "unknown"
	}
}

// checkObject makes sure raw decodes as an object (or null, or nothing) at a
// fraction of the cost of decoding it, so that a broken delivery still
// fails before the function runs.
func checkObject(raw []byte) error {
	t := bytes.TrimSpace(raw)
	switch {
	case len(t) == 0, string(t) == "null":
		return nil
	case t[0] != '{' || !json.Valid(t):
		return errors.New("not a JSON object")
	}
	return nil
}

func decodeObject(raw []byte) (*unstructured.Unstructured, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var m map[string]any
	if err := utiljson.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, nil
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func decodeValue(raw []byte) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var v any
	if err := utiljson.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return v, nil
}
