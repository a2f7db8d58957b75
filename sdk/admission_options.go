package sdk

import (
	"errors"
	"fmt"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Operation is an operation an admission binding intercepts.
type Operation string

// The operations, as the API server names them.
const (
	OpCreate  Operation = "CREATE"
	OpUpdate  Operation = "UPDATE"
	OpDelete  Operation = "DELETE"
	OpConnect Operation = "CONNECT"
)

var operations = map[Operation]tetherv1.AdmissionOperation{
	OpCreate:  tetherv1.AdmissionOperation_ADMISSION_OPERATION_CREATE,
	OpUpdate:  tetherv1.AdmissionOperation_ADMISSION_OPERATION_UPDATE,
	OpDelete:  tetherv1.AdmissionOperation_ADMISSION_OPERATION_DELETE,
	OpConnect: tetherv1.AdmissionOperation_ADMISSION_OPERATION_CONNECT,
}

// operationName maps the wire enum back; an operation this SDK does not
// know is left empty rather than refused: Review.Raw still names it.
func operationName(op tetherv1.AdmissionOperation) Operation {
	for name, v := range operations {
		if v == op {
			return name
		}
	}
	return ""
}

// FailurePolicy is what the API server does with a request when an
// admission binding's function fails, panics, answers too late, or no
// instance of the handler is there to answer.
type FailurePolicy int

// The failure policies.
const (
	// FailDefault leaves the choice to the broker: FailClosed for a binding
	// with Finalizer(FinalizerStrict), FailOpen otherwise.
	FailDefault FailurePolicy = iota
	// FailOpen admits the request (failurePolicy Ignore), so that a broken
	// or missing handler never blocks the cluster.
	FailOpen
	// FailClosed refuses the request (failurePolicy Fail).
	FailClosed
)

func (p FailurePolicy) proto() tetherv1.FailurePolicy {
	switch p {
	case FailOpen:
		return tetherv1.FailurePolicy_FAILURE_POLICY_IGNORE
	case FailClosed:
		return tetherv1.FailurePolicy_FAILURE_POLICY_FAIL
	default:
		return tetherv1.FailurePolicy_FAILURE_POLICY_UNSPECIFIED
	}
}

// admissionOptions are the options of a validate or mutate binding; its
// timeout is binding.timeout.
type admissionOptions struct {
	operations            []Operation
	subresource           string
	namespaceSelector     string
	matchConditions       []*tetherv1.MatchCondition
	failure               FailurePolicy
	noSideEffectsOnDryRun bool
}

// Operations sets the operations a validate or mutate binding intercepts
// (default OpCreate and OpUpdate).
func Operations(ops ...Operation) BindingOption {
	return func(b *binding) {
		b.only("Operations", Validate, Mutate)
		if len(ops) == 0 {
			b.fail("Operations: no operation given (leave the option out for CREATE and UPDATE)")
			return
		}
		for _, op := range ops {
			if _, ok := operations[op]; !ok {
				b.fail("Operations: unknown operation %q (want CREATE, UPDATE, DELETE or CONNECT)", op)
				return
			}
		}
		b.admission.operations = append(b.admission.operations, ops...)
	}
}

// Subresource makes a validate or mutate binding intercept requests for a
// subresource ("status", "scale") instead of the resource itself; "*"
// intercepts the resource and all its subresources.
func Subresource(name string) BindingOption {
	return func(b *binding) {
		b.only("Subresource", Validate, Mutate)
		if name != "*" && !dns1123Label.MatchString(name) {
			b.fail("Subresource: %q is neither \"*\" nor a subresource name", name)
			return
		}
		b.admission.subresource = name
	}
}

// NamespaceSelector limits a validate or mutate binding to objects in
// namespaces whose labels match a Kubernetes label selector, e.g.
// "env=prod". It adds to Namespaces: both must match. The namespaces the
// broker excludes from every webhook (kube-system, kube-node-lease and its
// own, unless its --admission-exclude-namespaces says otherwise) stay out
// whatever the selector matches.
func NamespaceSelector(selector string) BindingOption {
	return func(b *binding) {
		b.only("NamespaceSelector", Validate, Mutate)
		if selector == "" {
			b.fail("NamespaceSelector: empty selector")
			return
		}
		b.admission.namespaceSelector = selector
	}
}

// MatchCondition adds a CEL expression the API server evaluates before it
// calls a validate or mutate binding's webhook, as in
// admissionregistration.k8s.io/v1 (variables object, oldObject, request,
// authorizer); the request goes to the handler only when all are true.
// name is unique within the binding.
func MatchCondition(name, celExpr string) BindingOption {
	return func(b *binding) {
		b.only("MatchCondition", Validate, Mutate)
		if name == "" || celExpr == "" {
			b.fail("MatchCondition: empty name or expression (%q, %q)", name, celExpr)
			return
		}
		for _, mc := range b.admission.matchConditions {
			if mc.GetName() == name {
				b.fail("MatchCondition: name %q used twice", name)
				return
			}
		}
		b.admission.matchConditions = append(b.admission.matchConditions,
			&tetherv1.MatchCondition{Name: name, Expression: celExpr})
	}
}

// Failure sets the failure policy of a validate or mutate binding.
func Failure(policy FailurePolicy) BindingOption {
	return func(b *binding) {
		b.only("Failure", Validate, Mutate)
		b.admission.failure = policy
	}
}

// NoSideEffectsOnDryRun declares that a validate or mutate binding's
// function has effects beyond its answer, except for dry runs
// (Review.DryRun), which it recognizes and leaves alone. Without it the
// function must have no side effects at all.
func NoSideEffectsOnDryRun() BindingOption {
	return func(b *binding) {
		b.only("NoSideEffectsOnDryRun", Validate, Mutate)
		b.admission.noSideEffectsOnDryRun = true
	}
}

// checkAdmission reports what is wrong with a validate or mutate binding's
// options and the general options that do not fit it.
func (b *binding) checkAdmission() []error {
	var errs []error
	if t := b.timeout; t != 0 && (t < time.Second || t > 30*time.Second || t%time.Second != 0) {
		errs = append(errs, fmt.Errorf("Timeout %s: a webhook timeout is whole seconds from 1s to 30s", t))
	}
	if b.admission.failure < FailDefault || b.admission.failure > FailClosed {
		errs = append(errs, fmt.Errorf("unknown failure policy %d", int(b.admission.failure)))
	}
	if b.finalizer == FinalizerHold {
		errs = append(errs, fmt.Errorf("finalizer HOLD: %s bindings hold no objects; only FinalizerStrict (keep the webhook while the handler is absent) applies", b.kind.bindingName()))
	}
	if b.finalizer == FinalizerStrict && b.admission.failure == FailOpen {
		errs = append(errs, errors.New("FailOpen contradicts finalizer STRICT, which keeps the webhook failing closed"))
	}
	if b.fields != "" {
		errs = append(errs, errors.New("Fields: webhooks cannot select by field; use MatchCondition"))
	}
	if b.retries != nil || b.backoff > 0 || b.maxBackoff > 0 {
		errs = append(errs, errors.New("Retries and Backoff do not apply: a review is answered once"))
	}
	return errs
}

func (b *binding) admissionProto() *tetherv1.AdmissionOptions {
	a := b.admission
	pb := &tetherv1.AdmissionOptions{
		Subresource:       a.subresource,
		NamespaceSelector: a.namespaceSelector,
		MatchConditions:   a.matchConditions,
		Timeout:           duration(b.timeout),
		FailurePolicy:     a.failure.proto(),
	}
	for _, op := range a.operations {
		pb.Operations = append(pb.Operations, operations[op])
	}
	if a.noSideEffectsOnDryRun {
		pb.SideEffects = tetherv1.SideEffects_SIDE_EFFECTS_NONE_ON_DRY_RUN
	}
	return pb
}
