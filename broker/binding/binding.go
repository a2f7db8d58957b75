package binding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tether-dev/tether/broker/resource"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// MaxIDLength bounds binding ids and handler names: they become parts of
// annotation keys, which Kubernetes limits to 63 characters after the '/'.
const MaxIDLength = 40

// Binding is one validated subscription.
type Binding struct {
	ID       string
	Kind     Kind
	Resource resource.Resource
	// Namespaces limits the binding; empty means all.
	Namespaces  []string
	Labels      labels.Selector
	Fields      fields.Selector
	Annotations []AnnotationFilter
	// When is the compiled CEL expression, nil when the binding has none.
	When *Expression
	// FieldPath is the path of a field binding.
	FieldPath []string
	Optional  bool
	Policy    Policy
	Retry     RetryPolicy
	// Timer is set for timer bindings.
	Timer TimerOptions
	// Daemon is set for daemon bindings.
	Daemon DaemonOptions
	// Admission is set for validate and mutate bindings.
	Admission AdmissionOptions
	// Results says where results are stored.
	Results Results
}

// MinInterval is the shortest timer interval a binding may ask for.
const MinInterval = 100 * time.Millisecond

// TimerOptions are a timer binding's schedule.
type TimerOptions struct {
	Interval     time.Duration
	InitialDelay time.Duration
	// Idle: tick only after the object has been unchanged this long.
	Idle time.Duration
	// Sharp: ticks on a fixed grid instead of Interval after the last ack.
	Sharp bool
}

// DaemonOptions are a daemon binding's settings.
type DaemonOptions struct {
	// CancellationTimeout bounds the wait for a stop to be acknowledged.
	CancellationTimeout time.Duration
	// Restart a daemon that returns by itself, with backoff.
	Restart bool
}

// RetryPolicy is how failed deliveries of a binding are tried again.
type RetryPolicy struct {
	// Retries after the first attempt; negative means forever.
	Retries    int
	Timeout    time.Duration
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// Delay is the wait before attempt n+1 after n failed attempts (n >= 1).
func (r RetryPolicy) Delay(n int) time.Duration {
	d := r.Backoff
	for i := 1; i < n && d < r.MaxBackoff; i++ {
		if d > r.MaxBackoff/2 { // doubling would pass the cap, or overflow
			return r.MaxBackoff
		}
		d *= 2
	}
	return min(d, r.MaxBackoff)
}

// Exhausted reports whether n failed attempts use up the retries.
func (r RetryPolicy) Exhausted(n int) bool {
	return r.Retries >= 0 && n > r.Retries
}

// Holds reports whether objects matching b carry the handler's hold.
func (b *Binding) Holds() bool {
	return b.Policy != PolicyNone && !(b.Kind == Delete && b.Optional) && !b.Kind.IsAdmission()
}

// AnnotationFilter matches objects by one annotation.
type AnnotationFilter struct {
	Key   string
	Op    AnnotationOp
	Value string
}

// AnnotationOp is how an annotation filter tests its key.
type AnnotationOp int

// The annotation operators.
const (
	AnnotationPresent AnnotationOp = iota + 1
	AnnotationAbsent
	AnnotationEquals
)

// Defaults are the broker's settings for what a binding leaves unset.
type Defaults struct {
	Retries    int           // zero: forever
	Timeout    time.Duration // zero: DefaultTimeout
	Backoff    time.Duration // zero: DefaultBackoff
	MaxBackoff time.Duration // zero: DefaultMaxBackoff
	// CancellationTimeout of daemons; zero: DefaultCancellationTimeout.
	CancellationTimeout time.Duration
}

// What a binding that sets none gets, unless Defaults say otherwise.
const (
	DefaultTimeout             = time.Minute
	DefaultBackoff             = time.Second
	DefaultMaxBackoff          = 5 * time.Minute
	DefaultCancellationTimeout = time.Minute
)

func (d Defaults) withZeros() Defaults {
	if d.Retries == 0 {
		d.Retries = -1
	}
	if d.Timeout == 0 {
		d.Timeout = DefaultTimeout
	}
	if d.Backoff == 0 {
		d.Backoff = DefaultBackoff
	}
	if d.MaxBackoff == 0 {
		d.MaxBackoff = DefaultMaxBackoff
	}
	if d.CancellationTimeout == 0 {
		d.CancellationTimeout = DefaultCancellationTimeout
	}
	return d
}

// FieldError says which binding and which of its fields is wrong.
type FieldError struct {
	Index int    // position in Hello.bindings
	ID    string // the binding's id, when it has one
	Field string // the proto field name, e.g. "label_selector"
	Err   error
}

func (e *FieldError) Error() string {
	who := fmt.Sprintf("bindings[%d]", e.Index)
	if e.ID != "" {
		who += fmt.Sprintf(" (%q)", e.ID)
	}
	return fmt.Sprintf("%s.%s: %v", who, e.Field, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// ErrUnsupported marks a binding kind this broker does not serve yet.
var ErrUnsupported = errors.New("not supported by this broker")

// Resolver resolves the resource a binding names.
type Resolver interface {
	Resolve(ctx context.Context, q resource.Query) (resource.Resource, error)
}

// ValidateName checks a handler name or binding id.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("is required")
	}
	if len(name) > MaxIDLength {
		return fmt.Errorf("%q is longer than %d characters", name, MaxIDLength)
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("%q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// Compile validates every binding of a Hello. supported lists the kinds the
// broker serves; a binding of another kind is an ErrUnsupported FieldError.
func Compile(ctx context.Context, pbs []*tetherv1.Binding, res Resolver, def Defaults, supported map[Kind]bool) ([]*Binding, error) {
	if len(pbs) == 0 {
		return nil, &FieldError{Index: 0, Field: "bindings", Err: errors.New("at least one binding is required")}
	}
	seen := map[string]bool{}
	out := make([]*Binding, 0, len(pbs))
	for i, pb := range pbs {
		b, err := compileOne(ctx, pb, res, def.withZeros(), supported)
		if err != nil {
			fe := &FieldError{Index: i, ID: pb.GetId()}
			if !errors.As(err, &fe) {
				fe.Err = err
			}
			fe.Index, fe.ID = i, pb.GetId()
			return nil, fe
		}
		if seen[b.ID] {
			return nil, &FieldError{Index: i, ID: b.ID, Field: "id", Err: errors.New("is used by another binding")}
		}
		seen[b.ID] = true
		out = append(out, b)
	}
	return out, nil
}

func fieldErr(field string, err error) error { return &FieldError{Field: field, Err: err} }

func compileOne(ctx context.Context, pb *tetherv1.Binding, res Resolver, def Defaults, supported map[Kind]bool) (*Binding, error) {
	b, err := kindOf(pb, supported)
	if err != nil {
		return nil, err
	}
	r := pb.GetResource()
	if r == nil {
		return nil, fieldErr("resource", errors.New("is required"))
	}
	if b.Resource, err = res.Resolve(ctx, resource.Query{Group: r.GetGroup(), Version: r.GetVersion(), Resource: r.GetResource(), Kind: r.GetKind(), Name: r.GetName()}); err != nil {
		return nil, fieldErr("resource", err)
	}
	if err := b.compileSelection(pb); err != nil {
		return nil, err
	}
	if b.FieldPath, err = fieldPath(b.Kind, pb.GetField()); err != nil {
		return nil, err
	}
	if pb.GetOptional() && b.Kind != Delete {
		return nil, fieldErr("optional", errors.New("is only for delete bindings"))
	}
	b.Optional = pb.GetOptional()
	if b.Policy, err = policy(b.Kind, pb.GetFinalizer()); err != nil {
		return nil, fieldErr("finalizer", err)
	}
	if b.Kind == Index {
		if err := indexOptions(pb); err != nil {
			return nil, err
		}
	}
	if b.Retry, err = retryPolicy(pb, def); err != nil {
		return nil, err
	}
	if b.Timer, err = timerOptions(b.Kind, pb.GetTimer()); err != nil {
		return nil, err
	}
	if b.Daemon, err = daemonOptions(b.Kind, pb.GetDaemon(), def); err != nil {
		return nil, err
	}
	if b.Admission, err = admissionOptions(b, pb); err != nil {
		return nil, err
	}
	if b.Results, err = resultsOf(b, pb); err != nil {
		return nil, err
	}
	return b, nil
}

// kindOf starts a binding from pb's id and kind, which the broker must
// serve.
func kindOf(pb *tetherv1.Binding, supported map[Kind]bool) (*Binding, error) {
	if err := ValidateName(pb.GetId()); err != nil {
		return nil, fieldErr("id", err)
	}
	b := &Binding{ID: pb.GetId(), Kind: Kind(pb.GetKind())}
	if _, ok := kindNames[b.Kind]; !ok {
		return nil, fieldErr("kind", fmt.Errorf("unknown kind %v", pb.GetKind()))
	}
	if !supported[b.Kind] {
		if b.Kind.IsAdmission() {
			return nil, fieldErr("kind", fmt.Errorf("%s bindings are %w: it serves no admission webhooks (start it with --admission-listen)", b.Kind, ErrUnsupported))
		}
		return nil, fieldErr("kind", fmt.Errorf("%s bindings are %w", b.Kind, ErrUnsupported))
	}
	return b, nil
}

// compileSelection compiles which objects of b's resource pb selects: its
// namespaces, selectors, annotation filters and when condition.
func (b *Binding) compileSelection(pb *tetherv1.Binding) error {
	if n := len(pb.GetNamespaces()); n > tetherv1.MaxNamespaces {
		return fieldErr("namespaces", fmt.Errorf("%d namespaces, more than the %d a binding may name; bind cluster-wide and narrow with a label selector or a when condition", n, tetherv1.MaxNamespaces))
	}
	for i, ns := range pb.GetNamespaces() {
		if slices.Contains(pb.GetNamespaces()[:i], ns) {
			return fieldErr("namespaces", fmt.Errorf("%q is named twice", ns))
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fieldErr("namespaces", fmt.Errorf("%q: %s", ns, strings.Join(errs, "; ")))
		}
	}
	if len(pb.GetNamespaces()) > 0 && !b.Resource.Namespaced {
		return fieldErr("namespaces", fmt.Errorf("%s is not namespaced", b.Resource))
	}
	b.Namespaces = pb.GetNamespaces()
	var err error
	if b.Labels, err = labels.Parse(pb.GetLabelSelector()); err != nil {
		return fieldErr("label_selector", err)
	}
	if b.Fields, err = fields.ParseSelector(pb.GetFieldSelector()); err != nil {
		return fieldErr("field_selector", err)
	}
	for _, a := range pb.GetAnnotations() {
		f, err := annotationFilter(a)
		if err != nil {
			return fieldErr("annotations", err)
		}
		b.Annotations = append(b.Annotations, f)
	}
	if pb.GetWhen() != "" {
		if b.When, err = CompileExpression(pb.GetWhen()); err != nil {
			return fieldErr("when", err)
		}
	}
	return nil
}

// fieldPath is the path a field binding watches: required for field
// bindings, refused on the others.
func fieldPath(kind Kind, field string) ([]string, error) {
	switch {
	case kind == Field && field == "":
		return nil, fieldErr("field", errors.New("is required for field bindings"))
	case kind == Field:
		path := strings.Split(field, ".")
		for _, p := range path {
			if p == "" {
				return nil, fieldErr("field", fmt.Errorf("%q has an empty segment", field))
			}
		}
		return path, nil
	case field != "":
		return nil, fieldErr("field", fmt.Errorf("is only for field bindings"))
	}
	return nil, nil
}

func annotationFilter(a *tetherv1.AnnotationFilter) (AnnotationFilter, error) {
	if errs := validation.IsQualifiedName(a.GetKey()); len(errs) > 0 {
		return AnnotationFilter{}, fmt.Errorf("key %q: %s", a.GetKey(), strings.Join(errs, "; "))
	}
	f := AnnotationFilter{Key: a.GetKey(), Value: a.GetValue()}
	switch a.GetOperator() {
	case tetherv1.AnnotationFilter_OPERATOR_PRESENT:
		f.Op = AnnotationPresent
	case tetherv1.AnnotationFilter_OPERATOR_ABSENT:
		f.Op = AnnotationAbsent
	case tetherv1.AnnotationFilter_OPERATOR_EQUALS:
		f.Op = AnnotationEquals
	default:
		return AnnotationFilter{}, fmt.Errorf("key %q: operator is required", a.GetKey())
	}
	return f, nil
}

func policy(k Kind, p tetherv1.FinalizerPolicy) (Policy, error) {
	switch p {
	case tetherv1.FinalizerPolicy_FINALIZER_POLICY_UNSPECIFIED:
		return defaultPolicy(k), nil
	case tetherv1.FinalizerPolicy_FINALIZER_POLICY_NONE:
		return PolicyNone, nil
	case tetherv1.FinalizerPolicy_FINALIZER_POLICY_HOLD, tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT:
	default:
		return 0, fmt.Errorf("unknown policy %v", p)
	}
	if k.IsAdmission() {
		// STRICT keeps the webhook, failing closed, while the handler is
		// absent; admission bindings hold no objects.
		if p == tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT {
			return PolicyStrict, nil
		}
		return 0, fmt.Errorf("%v: %s bindings hold no objects; only STRICT (keep the webhook while the handler is absent) applies", p, k)
	}
	if defaultPolicy(k) == PolicyNone {
		return 0, fmt.Errorf("%v: %s bindings never hold objects", p, k)
	}
	if p == tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT {
		return PolicyStrict, nil
	}
	return PolicyHold, nil
}

func retryPolicy(pb *tetherv1.Binding, def Defaults) (RetryPolicy, error) {
	r := RetryPolicy{Retries: def.Retries, Timeout: def.Timeout, Backoff: def.Backoff, MaxBackoff: def.MaxBackoff}
	if pb.Retries != nil {
		r.Retries = int(max(pb.GetRetries(), -1))
	}
	for _, d := range []struct {
		field string
		dst   *time.Duration
		src   interface{ AsDuration() time.Duration }
		ok    bool
	}{
		{"timeout", &r.Timeout, pb.GetTimeout(), pb.GetTimeout() != nil},
		{"backoff", &r.Backoff, pb.GetBackoff(), pb.GetBackoff() != nil},
		{"max_backoff", &r.MaxBackoff, pb.GetMaxBackoff(), pb.GetMaxBackoff() != nil},
	} {
		if !d.ok {
			continue
		}
		v := d.src.AsDuration()
		if v < 0 {
			return r, fieldErr(d.field, fmt.Errorf("%v is negative", v))
		}
		if v > 0 {
			*d.dst = v
		}
	}
	if r.MaxBackoff < r.Backoff {
		r.MaxBackoff = r.Backoff
	}
	return r, nil
}

// Fingerprint identifies a set of bindings, so the broker can tell whether
// two instances of a handler declared the same ones.
func Fingerprint(bs []*Binding) string {
	var b strings.Builder
	for _, x := range bs {
		when := ""
		if x.When != nil {
			when = x.When.String()
		}
		fmt.Fprintf(&b, "%s|%s|%s|%v|%s|%s|%+v|%s|%v|%v|%v|%+v|%+v|%+v|%+v|%+v\n", x.ID, x.Kind, x.Resource, x.Namespaces,
			x.Labels, x.Fields, x.Annotations, when, x.FieldPath, x.Optional, x.Policy, x.Retry, x.Timer, x.Daemon, x.Admission.String(), x.Results)
	}
	return b.String()
}

func timerOptions(k Kind, pb *tetherv1.TimerOptions) (TimerOptions, error) {
	if k != Timer {
		if pb != nil {
			return TimerOptions{}, fieldErr("timer", fmt.Errorf("is only for timer bindings"))
		}
		return TimerOptions{}, nil
	}
	t := TimerOptions{
		Interval:     pb.GetInterval().AsDuration(),
		InitialDelay: pb.GetInitialDelay().AsDuration(),
		Idle:         pb.GetIdle().AsDuration(),
		Sharp:        pb.GetSharp(),
	}
	switch {
	case pb.GetInterval() == nil:
		return t, fieldErr("timer.interval", errors.New("is required"))
	case t.Interval < MinInterval:
		return t, fieldErr("timer.interval", fmt.Errorf("%v is shorter than %v", t.Interval, MinInterval))
	case t.InitialDelay < 0:
		return t, fieldErr("timer.initial_delay", fmt.Errorf("%v is negative", t.InitialDelay))
	case t.Idle < 0:
		return t, fieldErr("timer.idle", fmt.Errorf("%v is negative", t.Idle))
	}
	return t, nil
}

func daemonOptions(k Kind, pb *tetherv1.DaemonOptions, def Defaults) (DaemonOptions, error) {
	if k != Daemon {
		if pb != nil {
			return DaemonOptions{}, fieldErr("daemon", fmt.Errorf("is only for daemon bindings"))
		}
		return DaemonOptions{}, nil
	}
	d := DaemonOptions{CancellationTimeout: pb.GetCancellationTimeout().AsDuration(), Restart: pb.GetRestart()}
	if d.CancellationTimeout < 0 {
		return d, fieldErr("daemon.cancellation_timeout", fmt.Errorf("%v is negative", d.CancellationTimeout))
	}
	if d.CancellationTimeout == 0 {
		d.CancellationTimeout = def.CancellationTimeout
	}
	return d, nil
}
