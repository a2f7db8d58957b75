package binding

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"google.golang.org/protobuf/types/known/durationpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// The bounds and default of a webhook's timeout, as the API server has them.
const (
	MinAdmissionTimeout     = time.Second
	MaxAdmissionTimeout     = 30 * time.Second
	DefaultAdmissionTimeout = 10 * time.Second
)

// MaxMatchConditions bounds a binding's match conditions: the API server
// takes 64 per webhook, and the broker adds one of its own.
const MaxMatchConditions = 63

// The admission operations, as admissionregistration.k8s.io/v1 spells them.
const (
	OpCreate  = "CREATE"
	OpUpdate  = "UPDATE"
	OpDelete  = "DELETE"
	OpConnect = "CONNECT"
)

// The failure policies and side effects, as admissionregistration.k8s.io/v1
// spells them.
const (
	FailIgnore = "Ignore"
	FailFail   = "Fail"

	SideEffectsNone         = "None"
	SideEffectsNoneOnDryRun = "NoneOnDryRun"
)

// AdmissionOptions are a validate or mutate binding's webhook settings.
type AdmissionOptions struct {
	// Operations intercepted: OpCreate and friends.
	Operations []string
	// Subresource intercepted instead of the resource ("status"); "*" is
	// the resource and all its subresources.
	Subresource string
	// NamespaceSelector over the labels of the object's namespace; nil
	// selects every namespace.
	NamespaceSelector *metav1.LabelSelector
	// ObjectSelector is the binding's label selector; nil selects all.
	ObjectSelector  *metav1.LabelSelector
	MatchConditions []MatchCondition
	// Timeout of the webhook, as the API server enforces it.
	Timeout time.Duration
	// FailurePolicy: FailIgnore or FailFail. A STRICT binding has FailFail.
	FailurePolicy string
	// SideEffects: SideEffectsNone or SideEffectsNoneOnDryRun.
	SideEffects string
}

// MatchCondition is a CEL expression the API server evaluates before it
// calls the webhook.
type MatchCondition struct {
	Name       string
	Expression string
}

// IsAdmission reports whether k is served by the admission webhooks rather
// than by watching objects.
func (k Kind) IsAdmission() bool { return k == Validate || k == Mutate }

// Admits reports whether the binding intercepts op on the resource itself
// (sub == "") or on subresource sub.
func (a AdmissionOptions) Admits(op, sub string) bool {
	if a.Subresource != "*" && a.Subresource != sub {
		return false
	}
	for _, o := range a.Operations {
		if o == op {
			return true
		}
	}
	return false
}

func admissionOptions(b *Binding, pb *tetherv1.Binding) (AdmissionOptions, error) {
	ao := pb.GetAdmission()
	if !b.Kind.IsAdmission() {
		if ao != nil {
			return AdmissionOptions{}, fieldErr("admission", errors.New("is only for validate and mutate bindings"))
		}
		return AdmissionOptions{}, nil
	}
	if len(pb.GetFieldSelector()) > 0 {
		return AdmissionOptions{}, fieldErr("field_selector", errors.New("webhooks cannot select by field; use admission.match_conditions"))
	}
	a := AdmissionOptions{Subresource: ao.GetSubresource()}
	var err error
	if a.Operations, err = operations(ao.GetOperations()); err != nil {
		return a, err
	}
	if s := a.Subresource; s != "" && s != "*" {
		if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
			return a, fieldErr("admission.subresource", fmt.Errorf("%q: %s", s, strings.Join(errs, "; ")))
		}
	}
	if sel := ao.GetNamespaceSelector(); sel != "" {
		if !b.Resource.Namespaced {
			return a, fieldErr("admission.namespace_selector", fmt.Errorf("%s is not namespaced", b.Resource))
		}
		if a.NamespaceSelector, err = metav1.ParseToLabelSelector(sel); err != nil {
			return a, fieldErr("admission.namespace_selector", err)
		}
	}
	if sel := pb.GetLabelSelector(); sel != "" {
		if a.ObjectSelector, err = metav1.ParseToLabelSelector(sel); err != nil {
			return a, fieldErr("label_selector", err)
		}
	}
	if a.MatchConditions, err = matchConditions(ao.GetMatchConditions()); err != nil {
		return a, err
	}
	if a.Timeout, err = admissionTimeout(ao.GetTimeout()); err != nil {
		return a, err
	}
	if a.FailurePolicy, err = failurePolicy(ao.GetFailurePolicy(), b.Policy); err != nil {
		return a, err
	}
	switch ao.GetSideEffects() {
	case tetherv1.SideEffects_SIDE_EFFECTS_UNSPECIFIED, tetherv1.SideEffects_SIDE_EFFECTS_NONE:
		a.SideEffects = SideEffectsNone
	case tetherv1.SideEffects_SIDE_EFFECTS_NONE_ON_DRY_RUN:
		a.SideEffects = SideEffectsNoneOnDryRun
	default:
		return a, fieldErr("admission.side_effects", fmt.Errorf("unknown side effects %v", ao.GetSideEffects()))
	}
	return a, nil
}

// operations are the operations a webhook intercepts, each once; none
// given means CREATE and UPDATE.
func operations(ops []tetherv1.AdmissionOperation) ([]string, error) {
	var out []string
	for _, op := range ops {
		s, ok := map[tetherv1.AdmissionOperation]string{
			tetherv1.AdmissionOperation_ADMISSION_OPERATION_CREATE:  OpCreate,
			tetherv1.AdmissionOperation_ADMISSION_OPERATION_UPDATE:  OpUpdate,
			tetherv1.AdmissionOperation_ADMISSION_OPERATION_DELETE:  OpDelete,
			tetherv1.AdmissionOperation_ADMISSION_OPERATION_CONNECT: OpConnect,
		}[op]
		if !ok {
			return nil, fieldErr("admission.operations", fmt.Errorf("unknown operation %v", op))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		out = []string{OpCreate, OpUpdate}
	}
	return out, nil
}

// matchConditions checks a webhook's match conditions: bounded in number,
// each a qualified name used once and outside the broker's own prefix, with
// an expression that parses.
func matchConditions(mcs []*tetherv1.MatchCondition) ([]MatchCondition, error) {
	if n := len(mcs); n > MaxMatchConditions {
		return nil, fieldErr("admission.match_conditions", fmt.Errorf("%d conditions; at most %d", n, MaxMatchConditions))
	}
	var out []MatchCondition
	for i, mc := range mcs {
		field := fmt.Sprintf("admission.match_conditions[%d]", i)
		if errs := validation.IsQualifiedName(mc.GetName()); len(errs) > 0 {
			return nil, fieldErr(field+".name", fmt.Errorf("%q: %s", mc.GetName(), strings.Join(errs, "; ")))
		}
		if strings.HasPrefix(mc.GetName(), "tether.dev/") {
			return nil, fieldErr(field+".name", fmt.Errorf("%q: the prefix tether.dev/ is the broker's own", mc.GetName()))
		}
		if slices.ContainsFunc(out, func(c MatchCondition) bool { return c.Name == mc.GetName() }) {
			return nil, fieldErr(field+".name", fmt.Errorf("%q is used twice", mc.GetName()))
		}
		if err := parseCEL(mc.GetExpression()); err != nil {
			return nil, fieldErr(field+".expression", err)
		}
		out = append(out, MatchCondition{Name: mc.GetName(), Expression: mc.GetExpression()})
	}
	return out, nil
}

// admissionTimeout is the webhook's timeout: the default when unset, else
// whole seconds within the API server's bounds.
func admissionTimeout(d *durationpb.Duration) (time.Duration, error) {
	t := d.AsDuration()
	switch {
	case d == nil || t == 0:
		return DefaultAdmissionTimeout, nil
	case t < MinAdmissionTimeout || t > MaxAdmissionTimeout:
		return 0, fieldErr("admission.timeout", fmt.Errorf("%v is not between %v and %v", t, MinAdmissionTimeout, MaxAdmissionTimeout))
	case t%time.Second != 0:
		return 0, fieldErr("admission.timeout", fmt.Errorf("%v is not a whole number of seconds", t))
	}
	return t, nil
}

// failurePolicy is what the API server does when the webhook cannot
// answer: unset, IGNORE, unless the binding is STRICT, whose webhook fails
// closed (and refuses IGNORE).
func failurePolicy(fp tetherv1.FailurePolicy, hold Policy) (string, error) {
	switch fp {
	case tetherv1.FailurePolicy_FAILURE_POLICY_UNSPECIFIED:
		if hold == PolicyStrict {
			return FailFail, nil
		}
		return FailIgnore, nil
	case tetherv1.FailurePolicy_FAILURE_POLICY_IGNORE:
		if hold == PolicyStrict {
			return "", fieldErr("admission.failure_policy", errors.New("IGNORE contradicts finalizer STRICT, which keeps the webhook failing closed"))
		}
		return FailIgnore, nil
	case tetherv1.FailurePolicy_FAILURE_POLICY_FAIL:
		return FailFail, nil
	}
	return "", fieldErr("admission.failure_policy", fmt.Errorf("unknown policy %v", fp))
}

// RefuseExcludedNamespaces refuses an admission binding that names one of
// the namespaces the webhooks exclude (webhook.Options.ExcludeNamespaces):
// its webhook would never be called there, and the handler is better told
// at Hello than left with a webhook that silently never fires. The error is
// a FieldError on the binding's index in bs, which Compile keeps in the
// Hello's order.
func RefuseExcludedNamespaces(bs []*Binding, excluded []string) error {
	for i, b := range bs {
		if !b.Kind.IsAdmission() {
			continue
		}
		for _, ns := range b.Namespaces {
			if slices.Contains(excluded, ns) {
				return &FieldError{Index: i, ID: b.ID, Field: "namespaces", Err: fmt.Errorf(
					"%q is one of the namespaces the broker never sends to a webhook (%s), so that no webhook can lock the cluster or the broker out; "+
						"an administrator opts a namespace in with the broker's --admission-exclude-namespaces, except the broker's own",
					ns, strings.Join(excluded, ", "))}
			}
		}
	}
	return nil
}

// parseCEL checks a match condition's syntax. The API server compiles it
// against its own environment when the configuration is written; the broker
// catches what it can before it welcomes the handler.
func parseCEL(expr string) error {
	if strings.TrimSpace(expr) == "" {
		return errors.New("is required")
	}
	env, err := cel.NewEnv()
	if err != nil {
		return err
	}
	if _, iss := env.Parse(expr); iss.Err() != nil {
		return iss.Err()
	}
	return nil
}

// String renders the options for Fingerprint: selectors by value, not by
// pointer.
func (a AdmissionOptions) String() string {
	sel := func(s *metav1.LabelSelector) string {
		if s == nil {
			return ""
		}
		return metav1.FormatLabelSelector(s)
	}
	return fmt.Sprintf("ops=%v sub=%q ns=%q obj=%q mc=%v timeout=%v fail=%s side=%s", a.Operations, a.Subresource,
		sel(a.NamespaceSelector), sel(a.ObjectSelector), a.MatchConditions, a.Timeout, a.FailurePolicy, a.SideEffects)
}
