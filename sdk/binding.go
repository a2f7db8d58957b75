package sdk

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Func handles one delivery. Return nil for success (the event's patches and
// result are then applied), RetryAfter(err, d) or a plain error to be called
// again, Permanent(err) to give up. ctx ends at the delivery's deadline, when
// the broker withdraws the delivery, or when the handler stops.
//
// A daemon function (OnDaemon) is different: its ctx has no deadline and ends
// when the broker stops the daemon (context.Cause is then ErrDaemonStopped),
// when the session with the broker ends, or when the handler stops. What it
// returns is reported to the broker, but it has no outcome to choose.
type Func func(ctx context.Context, ev *Event) error

// FinalizerPolicy says whether and how a delete, timer or daemon binding
// holds its objects with the finalizer tether.dev/<handler>.
type FinalizerPolicy int

// The finalizer policies. FinalizerDefault leaves the choice to the broker:
// HOLD for delete, timer and daemon bindings, NONE for the others.
const (
	FinalizerDefault FinalizerPolicy = iota
	// FinalizerHold holds the object until the handler's deletion work is
	// done (the delete handler finished; the daemons and timers on the
	// object stopped), or until the handler has been absent past its grace.
	FinalizerHold
	// FinalizerStrict holds the object until the handler acknowledges, or
	// the cancellation timeout runs out. For cleanup that must not be skipped.
	FinalizerStrict
	// FinalizerNone never holds the object: the delete handler runs only if
	// the broker sees the deletion in time, and timers and daemons stop when
	// the broker sees the object gone.
	FinalizerNone
)

func (p FinalizerPolicy) String() string {
	switch p {
	case FinalizerHold:
		return "HOLD"
	case FinalizerStrict:
		return "STRICT"
	case FinalizerNone:
		return "NONE"
	default:
		return "DEFAULT"
	}
}

// MinTimerInterval is the shortest interval OnTimer accepts.
const MinTimerInterval = 100 * time.Millisecond

// BindingOption refines one binding registered with OnCreate, OnUpdate and
// friends.
type BindingOption func(*binding)

type binding struct {
	id          string
	kind        EventKind
	resource    Resource
	fn          Func
	field       string
	namespaces  []string
	labels      string
	fields      string
	annotations []*tetherv1.AnnotationFilter
	when        string
	optional    bool
	finalizer   FinalizerPolicy
	retries     *int32
	timeout     time.Duration
	backoff     time.Duration
	maxBackoff  time.Duration
	// timers
	interval     time.Duration
	initialDelay time.Duration
	idle         time.Duration
	sharp        bool
	// daemons
	cancellationTimeout time.Duration
	restart             bool
	// resultKey, when resultsInStatus, is the key under status results go to
	resultsInStatus bool
	resultKey       string
	// validate and mutate: the function and the webhook's options
	review    AdmissionFunc
	admission admissionOptions
	// kindOnly lists the options given that apply to some kinds of binding.
	kindOnly []kindOption
	errs     []error
}

// kindOption is an option that applies to bindings of some kinds only.
type kindOption struct {
	name  string
	kinds []EventKind
}

func (b *binding) fail(format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf(format, args...))
}

// only records that option name was given and applies to kinds only.
func (b *binding) only(name string, kinds ...EventKind) {
	b.kindOnly = append(b.kindOnly, kindOption{name: name, kinds: kinds})
}

// nonNegative checks an option's duration.
func (b *binding) nonNegative(name string, d time.Duration) bool {
	if d < 0 {
		b.fail("%s: negative duration %s", name, d)
		return false
	}
	return true
}

// ID names the binding: a DNS-1123 label of at most 40 characters. The
// default is "<kind>-<n>", n counting the bindings of that kind from 0
// ("create-0", "update-1"). Results are stored under the id, so keep it
// stable across releases.
func ID(id string) BindingOption {
	return func(b *binding) { b.id = id }
}

// Namespaces limits the binding to objects in these namespaces.
func Namespaces(namespaces ...string) BindingOption {
	return func(b *binding) { b.namespaces = append(b.namespaces, namespaces...) }
}

// Labels limits the binding to objects matching a Kubernetes label selector,
// e.g. "app=web,tier!=cache".
func Labels(selector string) BindingOption {
	return func(b *binding) { b.labels = selector }
}

// Fields limits the binding to objects matching a Kubernetes field
// selector, e.g. "metadata.name=config".
func Fields(selector string) BindingOption {
	return func(b *binding) { b.fields = selector }
}

// AnnotationPresent requires the annotation key to be set.
func AnnotationPresent(key string) BindingOption {
	return annotation(key, tetherv1.AnnotationFilter_OPERATOR_PRESENT, "")
}

// AnnotationAbsent requires the annotation key to be unset.
func AnnotationAbsent(key string) BindingOption {
	return annotation(key, tetherv1.AnnotationFilter_OPERATOR_ABSENT, "")
}

// AnnotationEquals requires the annotation key to have this value.
func AnnotationEquals(key, value string) BindingOption {
	return annotation(key, tetherv1.AnnotationFilter_OPERATOR_EQUALS, value)
}

func annotation(key string, op tetherv1.AnnotationFilter_Operator, value string) BindingOption {
	return func(b *binding) {
		if key == "" {
			b.fail("annotation filter: empty key")
			return
		}
		b.annotations = append(b.annotations, &tetherv1.AnnotationFilter{Key: key, Operator: op, Value: value})
	}
}

// When limits the binding to objects for which the CEL expression is true.
// The broker evaluates it over `object` (and `oldObject` for updates), e.g.
// `object.spec.replicas > 1`.
func When(celExpr string) BindingOption {
	return func(b *binding) { b.when = celExpr }
}

// Optional makes a delete binding best-effort: the object is not held, and
// the handler runs only if the broker sees the deletion in time.
func Optional() BindingOption {
	return func(b *binding) { b.optional = true }
}

// Finalizer sets the finalizer policy of a delete, timer or daemon binding.
// On a validate or mutate binding, FinalizerStrict keeps the webhook,
// failing closed, while the handler is absent (see OnValidate).
func Finalizer(policy FinalizerPolicy) BindingOption {
	return func(b *binding) { b.finalizer = policy }
}

// InitialDelay makes a timer wait d after the broker first sees an object
// before its first tick.
func InitialDelay(d time.Duration) BindingOption {
	return func(b *binding) {
		b.only("InitialDelay", Tick)
		if b.nonNegative("InitialDelay", d) {
			b.initialDelay = d
		}
	}
}

// Idle makes a timer tick only once the object has been unchanged for d.
func Idle(d time.Duration) BindingOption {
	return func(b *binding) {
		b.only("Idle", Tick)
		if b.nonNegative("Idle", d) {
			b.idle = d
		}
	}
}

// Sharp makes a timer tick on a fixed grid of its interval, instead of one
// interval after the previous tick was handled.
func Sharp() BindingOption {
	return func(b *binding) {
		b.only("Sharp", Tick)
		b.sharp = true
	}
}

// CancellationTimeout bounds how long the broker waits for a daemon to
// return once it asked it to stop; past it the daemon counts as stopped
// (with a warning Event) and the object is released. Zero means the
// broker's default.
func CancellationTimeout(d time.Duration) BindingOption {
	return func(b *binding) {
		b.only("CancellationTimeout", DaemonStart)
		if b.nonNegative("CancellationTimeout", d) {
			b.cancellationTimeout = d
		}
	}
}

// Restart has the broker start a daemon again, with backoff, when its
// function returns without having been asked to stop.
func Restart() BindingOption {
	return func(b *binding) {
		b.only("Restart", DaemonStart)
		b.restart = true
	}
}

// ResultsInStatus stores the binding's results (Event.SetResult) as the
// value of status.<key> on the object, where Kopf keeps a handler's return
// value and a CRD's printer columns can read it, instead of in the broker's
// annotation for the binding. An empty key means the binding's id. The key
// is one key, dots and slashes included, of printable ASCII without spaces
// and at most 253 bytes. The broker writes it as the handler: its RBAC must
// allow patching the resource's status subresource, when it has one. An
// object result is merged into what the key holds; any other replaces it.
// Not for validate and mutate bindings, which store no results.
func ResultsInStatus(key string) BindingOption {
	return func(b *binding) {
		b.only("ResultsInStatus", Create, Update, Delete, Resume, Field, Watch, Tick, DaemonStart)
		b.resultsInStatus, b.resultKey = true, key
	}
}

// Retries sets how many times a failing delivery is tried again before it
// counts as a permanent failure: 0 means never, negative means forever.
// Leaving the option out means the broker's default.
func Retries(n int) BindingOption {
	return func(b *binding) {
		r := int32(min(max(n, -1), math.MaxInt32))
		b.retries = &r
	}
}

// Timeout sets how long the broker waits for the ack of one attempt. For a
// validate or mutate binding it is the webhook's timeout instead: whole
// seconds from 1s to 30s (default 10s); the review's deadline is a little
// earlier.
func Timeout(d time.Duration) BindingOption {
	return func(b *binding) {
		if b.nonNegative("timeout", d) {
			b.timeout = d
		}
	}
}

// Backoff sets the delay after the first failed attempt, doubled after each
// further one up to maxDelay.
func Backoff(initial, maxDelay time.Duration) BindingOption {
	return func(b *binding) {
		if initial < 0 || maxDelay < 0 || (maxDelay > 0 && initial > maxDelay) {
			b.fail("backoff: need 0 <= initial <= max, got %s, %s", initial, maxDelay)
			return
		}
		b.backoff, b.maxBackoff = initial, maxDelay
	}
}

// OnCreate calls fn for objects the handler has not handled before.
func (h *Handler) OnCreate(r Resource, fn Func, opts ...BindingOption) {
	h.register(Create, r, "", fn, opts)
}

// OnUpdate calls fn when an object's essence (everything but status) changed
// since the handler last finished with it. The event carries Old and Diff.
func (h *Handler) OnUpdate(r Resource, fn Func, opts ...BindingOption) {
	h.register(Update, r, "", fn, opts)
}

// OnDelete calls fn when an object is being deleted. Unless Optional or
// Finalizer(FinalizerNone) is given, the broker holds the object until fn
// succeeds or fails permanently.
func (h *Handler) OnDelete(r Resource, fn Func, opts ...BindingOption) {
	h.register(Delete, r, "", fn, opts)
}

// OnResume calls fn for objects already handled, seen again after a broker
// start or the handler's return.
func (h *Handler) OnResume(r Resource, fn Func, opts ...BindingOption) {
	h.register(Resume, r, "", fn, opts)
}

// OnField calls fn when the value at the dotted path (e.g. "spec.replicas")
// changes. The event carries FieldOld and FieldNew.
func (h *Handler) OnField(r Resource, path string, fn Func, opts ...BindingOption) {
	h.register(Field, r, path, fn, opts)
}

// OnEvent calls fn for every raw watch event (ADDED, MODIFIED, DELETED) of
// matching objects. It never holds objects.
func (h *Handler) OnEvent(r Resource, fn Func, opts ...BindingOption) {
	h.register(Watch, r, "", fn, opts)
}

// OnTimer calls fn every interval (at least MinTimerInterval) for each
// matching object. The broker schedules every tick, one at a time per
// object: a slow function gets its ticks late, never piled up. A tick is
// handled like any other delivery (same outcomes, patches and result); its
// event carries Scheduled. Options: InitialDelay, Idle, Sharp. Unless
// Finalizer(FinalizerNone) is given, the broker holds each object while its
// timer runs.
func (h *Handler) OnTimer(r Resource, interval time.Duration, fn Func, opts ...BindingOption) {
	h.register(Tick, r, "", fn, opts, func(b *binding) { b.interval = interval })
}

// OnDaemon runs fn once per matching object, in its own goroutine, for as
// long as the broker wants it to: its ctx ends when the object is deleted or
// no longer matches, when the object moves to another instance, or when the
// session with the broker ends (the broker then starts the daemon again
// where it belongs). fn should return soon after ctx ends. A daemon does
// not count against the window, and patches set on its event are ignored.
// Options: CancellationTimeout, Restart. Unless Finalizer(FinalizerNone) is
// given, the broker holds each object while its daemon runs.
func (h *Handler) OnDaemon(r Resource, fn Func, opts ...BindingOption) {
	h.register(DaemonStart, r, "", fn, opts)
}

func (h *Handler) register(kind EventKind, r Resource, field string, fn Func, opts []BindingOption, init ...func(*binding)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := &binding{
		id:       fmt.Sprintf("%s-%d", kind.bindingName(), h.kindCount[kind]),
		kind:     kind,
		resource: r,
		fn:       fn,
		field:    field,
	}
	for _, f := range init {
		f(b)
	}
	h.kindCount[kind]++
	for _, opt := range opts {
		if opt != nil {
			opt(b)
		}
	}
	h.bindings = append(h.bindings, b)
}

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

const maxNameLen = 40

func checkName(what, name string) error {
	if len(name) > maxNameLen || !dns1123Label.MatchString(name) {
		return fmt.Errorf("%s %q is not a DNS-1123 label of at most %d characters", what, name, maxNameLen)
	}
	return nil
}

// check reports everything wrong with the binding that the SDK can see
// without the broker; the broker checks the rest (discovery, selectors,
// CEL, permissions).
func (b *binding) check() error {
	errs := append([]error(nil), b.errs...)
	if err := checkName("id", b.id); err != nil {
		errs = append(errs, err)
	}
	if b.fn == nil && b.review == nil {
		errs = append(errs, errors.New("nil handler function"))
	}
	switch r := b.resource; {
	case r.Resource == "" && r.Kind == "" && r.Name == "":
		errs = append(errs, errors.New("resource: none of resource, kind and name set"))
	case r.Name != "" && (r.Resource != "" || r.Kind != ""):
		errs = append(errs, fmt.Errorf("resource: name %q is set with resource or kind; set one", r.Name))
	}
	if b.kind == Field && (b.field == "" || strings.Contains("."+b.field+".", "..")) {
		errs = append(errs, fmt.Errorf("field path %q is not a dotted path", b.field))
	}
	if b.kind == Tick && b.interval < MinTimerInterval {
		errs = append(errs, fmt.Errorf("timer interval %s is below the minimum of %s", b.interval, MinTimerInterval))
	}
	if n := len(b.namespaces); n > tetherv1.MaxNamespaces {
		errs = append(errs, fmt.Errorf("%d namespaces, more than the %d a binding may name; bind cluster-wide and narrow with Labels or When", n, tetherv1.MaxNamespaces))
	}
	if b.optional && b.kind != Delete {
		errs = append(errs, errors.New("Optional applies to delete bindings only"))
	}
	for _, o := range b.kindOnly {
		if !slices.Contains(o.kinds, b.kind) {
			names := make([]string, len(o.kinds))
			for i, k := range o.kinds {
				names[i] = k.bindingName()
			}
			errs = append(errs, fmt.Errorf("%s applies to %s bindings only", o.name, strings.Join(names, " and ")))
		}
	}
	if b.finalizer < FinalizerDefault || b.finalizer > FinalizerNone {
		errs = append(errs, fmt.Errorf("unknown finalizer policy %d", int(b.finalizer)))
	}
	holds := b.finalizer == FinalizerHold || b.finalizer == FinalizerStrict
	if b.kind.admission() {
		errs = append(errs, b.checkAdmission()...)
	} else if holds && !b.kind.mayHold() {
		errs = append(errs, fmt.Errorf("finalizer %s applies to delete, timer and daemon bindings only", b.finalizer))
	}
	if holds && b.optional {
		errs = append(errs, fmt.Errorf("finalizer %s contradicts Optional", b.finalizer))
	}
	if err := checkResultKey(b.resultKey); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("binding %q (%s %s): %w", b.id, b.kind, b.resource, err)
	}
	return nil
}

// checkResultKey checks a ResultsInStatus key as the broker does.
func checkResultKey(key string) error {
	if len(key) > tetherv1.MaxResultKeyBytes {
		return fmt.Errorf("ResultsInStatus: key of %d bytes, more than %d", len(key), tetherv1.MaxResultKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("ResultsInStatus: key %q: byte %d is not printable ASCII other than a space", key, i)
		}
	}
	return nil
}

func (b *binding) proto() *tetherv1.Binding {
	pb := &tetherv1.Binding{
		Id:   b.id,
		Kind: b.kind.bindingKind(),
		Resource: &tetherv1.Resource{
			Group: b.resource.Group, Version: b.resource.Version,
			Resource: b.resource.Resource, Kind: b.resource.Kind, Name: b.resource.Name,
		},
		Namespaces:    b.namespaces,
		LabelSelector: b.labels,
		FieldSelector: b.fields,
		Annotations:   b.annotations,
		When:          b.when,
		Field:         b.field,
		Optional:      b.optional,
		Finalizer:     b.finalizer.proto(),
		Retries:       b.retries,
		Timeout:       duration(b.timeout),
		Backoff:       duration(b.backoff),
		MaxBackoff:    duration(b.maxBackoff),
	}
	if b.resultsInStatus {
		pb.Results, pb.ResultKey = tetherv1.ResultStore_RESULT_STORE_STATUS, b.resultKey
	}
	switch b.kind {
	case Tick:
		pb.Timer = &tetherv1.TimerOptions{
			Interval:     duration(b.interval),
			InitialDelay: duration(b.initialDelay),
			Idle:         duration(b.idle),
			Sharp:        b.sharp,
		}
	case DaemonStart:
		pb.Daemon = &tetherv1.DaemonOptions{
			CancellationTimeout: duration(b.cancellationTimeout),
			Restart:             b.restart,
		}
	case Validate, Mutate:
		pb.Timeout = nil // the webhook's timeout, in the admission options
		pb.Admission = b.admissionProto()
	}
	return pb
}

func (p FinalizerPolicy) proto() tetherv1.FinalizerPolicy {
	switch p {
	case FinalizerHold:
		return tetherv1.FinalizerPolicy_FINALIZER_POLICY_HOLD
	case FinalizerStrict:
		return tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT
	case FinalizerNone:
		return tetherv1.FinalizerPolicy_FINALIZER_POLICY_NONE
	default:
		return tetherv1.FinalizerPolicy_FINALIZER_POLICY_UNSPECIFIED
	}
}

func duration(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}
