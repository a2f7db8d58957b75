package webhook

import (
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/admission"
	"github.com/tether-dev/tether/broker/binding"
)

// The labels of every configuration the Manager writes; RemoveAll finds
// them by these.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "tether-broker"
	labelHandler   = "tether.dev/handler"
)

// The names of the match conditions that let Options.ExcludeUsers and
// ExcludeGroups through without calling the webhook.
const (
	excludeCondition      = "tether.dev/not-excluded-user"
	excludeGroupCondition = "tether.dev/not-excluded-group"
)

// ConfigName is the name of both webhook configurations of a handler.
func ConfigName(handler string) string { return "tether-" + handler }

func webhookName(handler, bindingID string) string {
	return bindingID + "." + handler + ".tether.dev"
}

func configLabels(handler string) map[string]string {
	return map[string]string{labelManagedBy: managedBy, labelHandler: handler}
}

// builder turns bindings into webhooks. Every field it sets is one the API
// server would otherwise default, so that a configuration read back compares
// equal to the one built and a resync writes nothing.
type builder struct {
	handler string
	// url is the base URL of the admission endpoint; empty when service is
	// used.
	url     string
	service *Service
	paths   *admission.PathKey // nil only without an endpoint
	ca      []byte
	// excludeUsers and excludeGroups are let through by match conditions.
	excludeUsers, excludeGroups []string
	// excludeNamespaces are left out by the namespace selector.
	excludeNamespaces []string
}

// desired is what a handler's configurations should hold; an empty list
// means that configuration should not exist.
type desired struct {
	validating []admissionregistrationv1.ValidatingWebhook
	mutating   []admissionregistrationv1.MutatingWebhook
}

// build computes the webhooks of a handler's admission bindings. absent keeps
// only STRICT bindings, with failure policy Fail.
func (bl builder) build(bindings []*binding.Binding, absent bool) desired {
	var d desired
	for _, b := range bindings {
		if !b.Kind.IsAdmission() || (absent && b.Policy != binding.PolicyStrict) {
			continue
		}
		fail := admissionregistrationv1.FailurePolicyType(b.Admission.FailurePolicy)
		if absent {
			fail = admissionregistrationv1.Fail
		}
		name := webhookName(bl.handler, b.ID)
		cc := bl.clientConfig(b.ID)
		rules := rules(b)
		equivalent := admissionregistrationv1.Equivalent
		nsSel, objSel := namespaceSelector(b, bl.excludeNamespaces), objectSelector(b)
		side := admissionregistrationv1.SideEffectClass(b.Admission.SideEffects)
		timeout := int32(b.Admission.Timeout / time.Second)
		conds := bl.matchConditions(b)
		reviews := []string{"v1"}
		switch b.Kind {
		case binding.Validate:
			d.validating = append(d.validating, admissionregistrationv1.ValidatingWebhook{
				Name: name, ClientConfig: cc, Rules: rules, FailurePolicy: &fail, MatchPolicy: &equivalent,
				NamespaceSelector: nsSel, ObjectSelector: objSel, SideEffects: &side, TimeoutSeconds: &timeout,
				AdmissionReviewVersions: reviews, MatchConditions: conds,
			})
		case binding.Mutate:
			never := admissionregistrationv1.NeverReinvocationPolicy
			d.mutating = append(d.mutating, admissionregistrationv1.MutatingWebhook{
				Name: name, ClientConfig: cc, Rules: rules, FailurePolicy: &fail, MatchPolicy: &equivalent,
				NamespaceSelector: nsSel, ObjectSelector: objSel, SideEffects: &side, TimeoutSeconds: &timeout,
				AdmissionReviewVersions: reviews, MatchConditions: conds, ReinvocationPolicy: &never,
			})
		}
	}
	return d
}

func (bl builder) clientConfig(bindingID string) admissionregistrationv1.WebhookClientConfig {
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: slices.Clone(bl.ca)}
	var path string
	if bl.paths != nil {
		path = bl.paths.Path(bl.handler, bindingID)
	}
	if bl.service != nil {
		port := bl.service.Port
		cc.Service = &admissionregistrationv1.ServiceReference{
			Namespace: bl.service.Namespace, Name: bl.service.Name, Path: &path, Port: &port,
		}
		return cc
	}
	u := bl.url + path
	cc.URL = &u
	return cc
}

func rules(b *binding.Binding) []admissionregistrationv1.RuleWithOperations {
	r := b.Resource
	var resources []string
	switch sub := b.Admission.Subresource; sub {
	case "":
		resources = []string{r.Resource}
	case "*":
		resources = []string{r.Resource, r.Resource + "/*"}
	default:
		resources = []string{r.Resource + "/" + sub}
	}
	scope := admissionregistrationv1.ClusterScope
	if r.Namespaced {
		scope = admissionregistrationv1.NamespacedScope
	}
	ops := make([]admissionregistrationv1.OperationType, 0, len(b.Admission.Operations))
	for _, op := range b.Admission.Operations {
		ops = append(ops, admissionregistrationv1.OperationType(op))
	}
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: ops,
		Rule: admissionregistrationv1.Rule{
			APIGroups:   []string{r.Group},
			APIVersions: []string{r.Version},
			Resources:   resources,
			Scope:       &scope,
		},
	}}
}

// namespaceSelector is the binding's namespace selector narrowed to its
// namespace list and away from the excluded namespaces. The API server can
// only select namespaces by name through the label every namespace has with
// its own name. A selector's requirements all apply, so the exclusion holds
// whatever the binding selects. For a Namespace object itself the API
// server matches the selector against that Namespace's labels, so writes to
// the excluded Namespaces are left out too; other cluster-scoped objects
// are never selected by namespace.
func namespaceSelector(b *binding.Binding, excluded []string) *metav1.LabelSelector {
	sel := &metav1.LabelSelector{}
	if b.Admission.NamespaceSelector != nil {
		sel = b.Admission.NamespaceSelector.DeepCopy()
	}
	if len(b.Namespaces) > 0 {
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
			Key:      corev1.LabelMetadataName,
			Operator: metav1.LabelSelectorOpIn,
			Values:   slices.Clone(b.Namespaces),
		})
	}
	if len(excluded) > 0 {
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
			Key:      corev1.LabelMetadataName,
			Operator: metav1.LabelSelectorOpNotIn,
			Values:   slices.Clone(excluded),
		})
	}
	return sel
}

func objectSelector(b *binding.Binding) *metav1.LabelSelector {
	if b.Admission.ObjectSelector == nil {
		return &metav1.LabelSelector{}
	}
	return b.Admission.ObjectSelector.DeepCopy()
}

func (bl builder) matchConditions(b *binding.Binding) []admissionregistrationv1.MatchCondition {
	var out []admissionregistrationv1.MatchCondition
	if len(bl.excludeUsers) > 0 {
		out = append(out, admissionregistrationv1.MatchCondition{
			Name:       excludeCondition,
			Expression: "!(request.userInfo.username in " + celList(bl.excludeUsers) + ")",
		})
	}
	if len(bl.excludeGroups) > 0 {
		out = append(out, admissionregistrationv1.MatchCondition{
			Name:       excludeGroupCondition,
			Expression: "!request.userInfo.groups.exists(g, g in " + celList(bl.excludeGroups) + ")",
		})
	}
	for _, mc := range b.Admission.MatchConditions {
		out = append(out, admissionregistrationv1.MatchCondition{Name: mc.Name, Expression: mc.Expression})
	}
	return out
}

// celList is a CEL list of the strings.
func celList(ss []string) string {
	quoted := make([]string, len(ss))
	for i, s := range ss {
		// Go's quoting is valid CEL: both know \" \\ \n \xHH \uHHHH.
		quoted[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
