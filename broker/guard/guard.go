package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/jsonpatch"
	"github.com/tether-dev/tether/broker/kube"
)

// Finalizer is the guard. It is not of the form tether.dev/<name>, which
// belongs to handlers' holds.
const Finalizer = "broker.tether.dev/uninstall"

// Resources are what may be guarded, in the order they are freed: the
// ServiceAccount last, since its token is gone with it.
var Resources = []schema.GroupVersionResource{
	{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "", Version: "v1", Resource: "serviceaccounts"},
}

// Ref names a guarded object in the broker's namespace.
type Ref struct {
	Resource schema.GroupVersionResource
	Name     string
}

func (r Ref) String() string { return r.Resource.Resource + "/" + r.Name }

// Guarded lists what the broker, authenticated as kube's user, needs in
// namespace, in the order Unprotect must free them: the leader Lease (when
// lease is not empty) and, when the user is a ServiceAccount of namespace,
// the RoleBindings there that name it and their Roles (but those of
// handlers' grants to impersonate them), then that ServiceAccount. sa is the
// ServiceAccount's name, "" for a user of another kind. When the
// RoleBindings cannot be listed, refs still ends with the ServiceAccount.
func Guarded(ctx context.Context, kube kube.Interface, namespace, lease string) (refs []Ref, sa string, err error) {
	if lease != "" {
		refs = append(refs, Ref{Resources[0], lease})
	}
	r, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return refs, "", fmt.Errorf("asking who the broker is: %w", err)
	}
	ns, sa, ok := serviceAccountOf(r.Status.UserInfo.Username)
	if !ok || ns != namespace {
		return refs, "", nil // a user of its own, as on a laptop: nothing of it goes with the namespace
	}
	account := Ref{Resources[3], sa}
	bindings, err := kube.RbacV1().RoleBindings(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return append(refs, account), sa, fmt.Errorf("listing the RoleBindings of %s: %w", namespace, err)
	}
	// The broker's own (named as its ServiceAccount) go after the others:
	// it may get and patch those by name whatever else it lost (its
	// ClusterRole tether-broker-base), while its rights on the others may
	// go with its own RoleBinding.
	var others, own []Ref
	add := func(r Ref) {
		switch {
		case slices.Contains(others, r) || slices.Contains(own, r):
		case r.Name == sa:
			own = append(own, r)
		default:
			others = append(others, r)
		}
	}
	var granting []rbacv1.RoleBinding
	for _, rb := range bindings.Items {
		if names(rb.Subjects, namespace, sa) && !impersonatesOnly(ctx, kube, namespace, rb.RoleRef) {
			granting = append(granting, rb)
		}
	}
	for _, rb := range granting {
		add(Ref{Resources[1], rb.Name})
	}
	for _, rb := range granting {
		if rb.RoleRef.Kind == "Role" {
			add(Ref{Resources[2], rb.RoleRef.Name})
		}
	}
	refs = append(append(refs, others...), own...)
	return append(refs, account), sa, nil
}

// impersonatesOnly reports whether ref is a Role of namespace whose every
// rule grants impersonate alone: a handler's grant to act as its
// ServiceAccount, which releasing needs not, so that uninstalling a handler
// whose ServiceAccount lives in the broker's namespace is not held up
// until the broker's own uninstall. A Role it cannot read is guarded.
func impersonatesOnly(ctx context.Context, kube kube.Interface, namespace string, ref rbacv1.RoleRef) bool {
	if ref.Kind != "Role" {
		return false
	}
	role, err := kube.RbacV1().Roles(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil || len(role.Rules) == 0 {
		return false
	}
	for _, r := range role.Rules {
		if !slices.Equal(r.Verbs, []string{"impersonate"}) {
			return false
		}
	}
	return true
}

// serviceAccountOf parses system:serviceaccount:<namespace>:<name>.
func serviceAccountOf(user string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != ""
}

// names reports whether subjects include the ServiceAccount namespace/name.
func names(subjects []rbacv1.Subject, namespace, name string) bool {
	for _, s := range subjects {
		if s.Kind == rbacv1.ServiceAccountKind && s.Name == name && (s.Namespace == namespace || s.Namespace == "") {
			return true
		}
	}
	return false
}

// Protect puts the guard on each of refs that lacks it. An object that is
// not there is skipped.
func Protect(ctx context.Context, dyn dynamic.Interface, namespace string, refs []Ref) error {
	var errs []error
	for _, r := range refs {
		if _, err := set(ctx, dyn, namespace, r, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Unprotect takes the guard off each of refs that carries it, by name and
// in the order given (Guarded's), and returns what it freed. It lists
// nothing: once it has freed the broker's RoleBinding, the broker may
// still get and patch its Role and ServiceAccount by name, and nothing
// else in namespace.
func Unprotect(ctx context.Context, dyn dynamic.Interface, namespace string, refs []Ref) ([]Ref, error) {
	var freed []Ref
	var errs []error
	for _, r := range refs {
		changed, err := set(ctx, dyn, namespace, r, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if changed {
			freed = append(freed, r)
		}
	}
	return freed, errors.Join(errs...)
}

// UnprotectAll takes the guard off every object of namespace that carries
// it, in the order of Resources, and returns what it freed: for an admin
// who does not know what the broker guarded (`broker release --all`). It
// lists each of Resources in namespace.
func UnprotectAll(ctx context.Context, dyn dynamic.Interface, namespace string) ([]Ref, error) {
	var refs []Ref
	var errs []error
	for _, gvr := range Resources {
		list, err := dyn.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("listing %s in %s: %w", gvr.Resource, namespace, err))
			continue
		}
		for _, obj := range list.Items {
			if hasGuard(obj.GetFinalizers()) {
				refs = append(refs, Ref{gvr, obj.GetName()})
			}
		}
	}
	freed, err := Unprotect(ctx, dyn, namespace, refs)
	return freed, errors.Join(append(errs, err)...)
}

func hasGuard(finalizers []string) bool {
	for _, f := range finalizers {
		if f == Finalizer {
			return true
		}
	}
	return false
}

// set adds (on) or removes the guard with a JSON patch that tests the list
// as it was read, read again after a refused test. It reports whether it
// changed the object; one that is not there is left alone.
func set(ctx context.Context, dyn dynamic.Interface, namespace string, r Ref, on bool) (bool, error) {
	res := dyn.Resource(r.Resource).Namespace(namespace)
	var err error
	for range 5 {
		var obj *unstructured.Unstructured
		obj, err = res.Get(ctx, r.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			break
		}
		var p jsonpatch.Patch
		if on {
			if hold.AddFinalizer(&p, obj, Finalizer) {
				p.Test("/metadata/resourceVersion", obj.GetResourceVersion())
			}
		} else {
			hold.RemoveFinalizer(&p, obj, Finalizer)
		}
		if p.Empty() {
			return false, nil
		}
		body, jerr := p.JSON()
		if jerr != nil {
			return false, jerr
		}
		_, err = res.Patch(ctx, r.Name, types.JSONPatchType, body, metav1.PatchOptions{})
		if err == nil {
			return true, nil
		}
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
			break // not a stale read: another try cannot help
		}
	}
	what := "taking the uninstall guard off"
	if on {
		what = "putting the uninstall guard on"
	}
	return false, fmt.Errorf("%s %s in %s: %w", what, r, namespace, err)
}
