package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/jsonpatch"
)

// Finalizer is the guard. It is not of the form tether.dev/<name>, which
// belongs to handlers' holds.
const Finalizer = "broker.tether.dev/uninstall"

// Resources are what may be guarded, in the order Unprotect frees them:
// the ServiceAccount last, since its token is gone with it.
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
// namespace: the leader Lease (when lease is not empty) and, when the user
// is a ServiceAccount of namespace, that ServiceAccount and the
// RoleBindings there that name it, with their Roles. sa is the
// ServiceAccount's name, "" for a user of another kind.
func Guarded(ctx context.Context, kube kubernetes.Interface, namespace, lease string) (refs []Ref, sa string, err error) {
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
	bindings, err := kube.RbacV1().RoleBindings(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return refs, sa, fmt.Errorf("listing the RoleBindings of %s: %w", namespace, err)
	}
	for _, rb := range bindings.Items {
		if !names(rb.Subjects, namespace, sa) {
			continue
		}
		refs = append(refs, Ref{Resources[1], rb.Name})
		if rb.RoleRef.Kind == "Role" {
			refs = append(refs, Ref{Resources[2], rb.RoleRef.Name})
		}
	}
	return append(refs, Ref{Resources[3], sa}), sa, nil
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
		if err := set(ctx, dyn, namespace, r, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Unprotect takes the guard off every object of namespace that carries it,
// in the order of Resources, and returns what it freed.
func Unprotect(ctx context.Context, dyn dynamic.Interface, namespace string) ([]Ref, error) {
	var freed []Ref
	var errs []error
	for _, gvr := range Resources {
		list, err := dyn.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("listing %s in %s: %w", gvr.Resource, namespace, err))
			continue
		}
		for _, obj := range list.Items {
			if !hasGuard(obj.GetFinalizers()) {
				continue
			}
			r := Ref{gvr, obj.GetName()}
			if err := set(ctx, dyn, namespace, r, false); err != nil {
				errs = append(errs, err)
				continue
			}
			freed = append(freed, r)
		}
	}
	return freed, errors.Join(errs...)
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
// as it was read, read again after a refused test.
func set(ctx context.Context, dyn dynamic.Interface, namespace string, r Ref, on bool) error {
	res := dyn.Resource(r.Resource).Namespace(namespace)
	var err error
	for range 5 {
		var obj *unstructured.Unstructured
		obj, err = res.Get(ctx, r.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
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
			return nil
		}
		body, jerr := p.JSON()
		if jerr != nil {
			return jerr
		}
		_, err = res.Patch(ctx, r.Name, types.JSONPatchType, body, metav1.PatchOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
			break // not a stale read: another try cannot help
		}
	}
	what := "taking the uninstall guard off"
	if on {
		what = "putting the uninstall guard on"
	}
	return fmt.Errorf("%s %s in %s: %w", what, r, namespace, err)
}
