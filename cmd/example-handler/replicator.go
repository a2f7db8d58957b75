package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/sdk"
)

// The replicator's interface: the annotations users put on a source, and
// the annotation and label every copy carries.
const (
	replicatorPrefix = "replicator.tether.dev/"
	annEnabled       = replicatorPrefix + "enabled"
	annInclude       = replicatorPrefix + "include-namespaces"
	annExclude       = replicatorPrefix + "exclude-namespaces"
	annSource        = replicatorPrefix + "source"
	labelCopy        = replicatorPrefix + "copy"

	// lastApplied is kubectl's record of an apply; on a Secret it holds
	// the data, and it describes the source, not the copy.
	lastApplied = "kubectl.kubernetes.io/last-applied-configuration"
	// fieldManager names the replicator's writes in managedFields.
	fieldManager = "tether-example-replicator"
	// writeAttempts bounds the conflict retries of one copy in one
	// delivery; past it the delivery is retried by the broker.
	writeAttempts = 5
)

// replicated are the resources the replicator copies.
var replicated = []schema.GroupVersionResource{
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "configmaps"},
}

// systemNamespaces are never a copy's target: the cluster's own
// components live there, and a copy could shadow one of their objects.
var systemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// replicator copies annotated Secrets and ConfigMaps into other namespaces.
type replicator struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	// within are the namespaces it works in (nil: every namespace): it
	// copies into them only and looks for copies there only, which is all
	// a handler granted namespace by namespace may do.
	within []string
}

// register binds the replicator for every replicated resource: create and
// update replicate at once, the timer reconciles every interval, delete
// removes the copies. Only sources match (AnnotationEquals), never copies.
// The timer and the delete binding keep the default finalizer policy, so
// every source carries the handler's hold.
func (r *replicator) register(h *sdk.Handler, interval time.Duration, scope []sdk.BindingOption) {
	for _, gvr := range replicated {
		only := append(slices.Clone(scope), sdk.AnnotationEquals(annEnabled, "true"))
		with := func(id string, extra ...sdk.BindingOption) []sdk.BindingOption {
			return append(append(slices.Clone(only), sdk.ID(id+"-"+gvr.Resource)), extra...)
		}
		sync := func(ctx context.Context, ev *sdk.Event) error { return r.sync(ctx, gvr, ev) }
		res := sdk.GVR(gvr.Group, gvr.Version, gvr.Resource)
		h.OnCreate(res, sync, with("create")...)
		h.OnUpdate(res, sync, with("update")...)
		h.OnTimer(res, interval, sync, with("reconcile", sdk.InitialDelay(interval))...)
		h.OnDelete(res, func(ctx context.Context, ev *sdk.Event) error {
			return r.cleanup(ctx, gvr, ev)
		}, with("cleanup")...)
	}
}

// sourceKey is how a copy names its source: "<namespace>/<name>".
func sourceKey(obj *unstructured.Unstructured) string {
	return obj.GetNamespace() + "/" + obj.GetName()
}

// sync makes the copies of the event's source match it: one in every
// target namespace, none elsewhere. An object of the source's name that is
// not its copy is left alone, and named in a permanent error.
func (r *replicator) sync(ctx context.Context, gvr schema.GroupVersionResource, ev *sdk.Event) error {
	src, log := ev.Object(), ev.Logger()
	key := sourceKey(src)
	namespaces, err := r.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	anns := src.GetAnnotations()
	existing := activeNamespaces(namespaces.Items)
	if r.within != nil {
		existing = slices.DeleteFunc(existing, func(ns string) bool { return !slices.Contains(r.within, ns) })
	}
	targets := selectNamespaces(existing, src.GetNamespace(), anns[annInclude], anns[annExclude])
	copies, err := r.copiesOf(ctx, gvr, key)
	if err != nil {
		return err
	}
	var skipped []string
	for _, ns := range targets {
		err := r.ensure(ctx, gvr, src, ns, copies[ns])
		var nc *notCopyError
		switch {
		case errors.As(err, &nc):
			skipped = append(skipped, nc.Error())
		case err != nil:
			return fmt.Errorf("replicating %s to namespace %s: %w", key, ns, err)
		}
	}
	for ns, c := range copies {
		if slices.Contains(targets, ns) {
			continue
		}
		if err := deleteExact(ctx, r.dyn.Resource(gvr), c); err != nil {
			return fmt.Errorf("removing the copy in %s, no longer a target: %w", ns, err)
		}
		log.Info("removed a copy from a namespace that is no longer a target", "target", ns)
	}
	log.Debug("replicated", "targets", targets)
	if len(skipped) > 0 {
		return sdk.Permanent(fmt.Errorf("not replicated: %s", strings.Join(skipped, "; ")))
	}
	return nil
}

// cleanup deletes every copy of the source that is being deleted.
func (r *replicator) cleanup(ctx context.Context, gvr schema.GroupVersionResource, ev *sdk.Event) error {
	copies, err := r.copiesOf(ctx, gvr, sourceKey(ev.Object()))
	if err != nil {
		return err
	}
	for ns, c := range copies {
		if err := deleteExact(ctx, r.dyn.Resource(gvr), c); err != nil {
			return fmt.Errorf("deleting the copy in %s: %w", ns, err)
		}
	}
	ev.Logger().Info("source deleted; copies removed", "copies", len(copies))
	return nil
}

// copiesOf lists the copies of the source key in every namespace it works
// in, by the copy label.
func (r *replicator) copiesOf(ctx context.Context, gvr schema.GroupVersionResource, key string) (map[string]*unstructured.Unstructured, error) {
	where := r.within
	if where == nil {
		where = []string{metav1.NamespaceAll}
	}
	out := map[string]*unstructured.Unstructured{}
	for _, ns := range where {
		list, err := r.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: labelCopy + "=true"})
		if err != nil {
			return nil, fmt.Errorf("listing copies: %w", err)
		}
		for i := range list.Items {
			if c := &list.Items[i]; isCopyOf(c, key) {
				out[c.GetNamespace()] = c
			}
		}
	}
	return out, nil
}

// notCopyError names an object that stands where a copy should go.
type notCopyError struct{ namespace, name, owner string }

func (e *notCopyError) Error() string {
	if e.owner != "" {
		return fmt.Sprintf("%s/%s is a copy of %s", e.namespace, e.name, e.owner)
	}
	return fmt.Sprintf("%s/%s exists and is not a copy; left as it is", e.namespace, e.name)
}

// ensure creates or updates the copy of src in ns; cur is the copy as
// listed (nil when there was none). Conflicts are retried on fresh state.
func (r *replicator) ensure(ctx context.Context, gvr schema.GroupVersionResource, src *unstructured.Unstructured, ns string, cur *unstructured.Unstructured) error {
	client, key := r.dyn.Resource(gvr).Namespace(ns), sourceKey(src)
	for range writeAttempts {
		if cur == nil {
			_, err := client.Create(ctx, buildCopy(src, ns, nil), metav1.CreateOptions{FieldManager: fieldManager})
			if !apierrors.IsAlreadyExists(err) {
				return err
			}
		} else {
			if !isCopyOf(cur, key) {
				return &notCopyError{namespace: ns, name: cur.GetName(), owner: cur.GetAnnotations()[annSource]}
			}
			want := buildCopy(src, ns, cur)
			if upToDate(cur, want) {
				return nil
			}
			_, err := client.Update(ctx, want, metav1.UpdateOptions{FieldManager: fieldManager})
			switch {
			case err == nil:
				return nil
			case apierrors.IsInvalid(err):
				// An immutable copy (or a Secret whose type changed)
				// cannot be updated: replace it.
				if err := deleteExact(ctx, r.dyn.Resource(gvr), cur); err != nil {
					return err
				}
				cur = nil
				continue
			case !apierrors.IsConflict(err) && !apierrors.IsNotFound(err):
				return err
			}
		}
		got, err := client.Get(ctx, src.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cur = nil
		case err != nil:
			return err
		default:
			cur = got
		}
		if cur != nil && cur.GetLabels()[labelCopy] != "true" {
			return &notCopyError{namespace: ns, name: cur.GetName()}
		}
	}
	return fmt.Errorf("%d conflicting writes in a row; trying again later", writeAttempts)
}

// deleteExact deletes obj, but only the version that was read: a newer one,
// or another object re-created under the name, stays.
func deleteExact(ctx context.Context, res dynamic.NamespaceableResourceInterface, obj *unstructured.Unstructured) error {
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	err := res.Namespace(obj.GetNamespace()).Delete(ctx, obj.GetName(), metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// activeNamespaces returns the names of the namespaces that are not being
// deleted (nothing can be created in those).
func activeNamespaces(items []corev1.Namespace) []string {
	var out []string
	for _, ns := range items {
		if ns.DeletionTimestamp == nil && ns.Status.Phase != corev1.NamespaceTerminating {
			out = append(out, ns.Name)
		}
	}
	return out
}

// selectNamespaces picks the namespaces a source in self is copied to, out
// of the existing ones: those in the include list (every one when the list
// is empty), minus those in the exclude list, self and the system
// namespaces. Lists are comma-separated; blanks around names are ignored.
// The result is sorted.
func selectNamespaces(existing []string, self, include, exclude string) []string {
	inc, exc := splitList(include), splitList(exclude)
	var out []string
	for _, ns := range existing {
		if ns == self || slices.Contains(exc, ns) || slices.Contains(systemNamespaces, ns) ||
			(len(inc) > 0 && !slices.Contains(inc, ns)) {
			continue
		}
		out = append(out, ns)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// isCopyOf reports whether obj is the replicator's copy of the source key.
func isCopyOf(obj *unstructured.Unstructured, key string) bool {
	return obj.GetLabels()[labelCopy] == "true" && obj.GetAnnotations()[annSource] == key
}

// tetherAnnotation reports whether an annotation key is in the tether.dev
// domain: the replicator's settings, the TTL, and every handler's
// bookkeeping (<handler>.tether.dev/...).
func tetherAnnotation(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	return ok && (prefix == "tether.dev" || strings.HasSuffix(prefix, ".tether.dev"))
}

// buildCopy returns the copy of src in namespace ns: its payload (every
// top-level field but metadata and status: data, type, immutable...), its
// labels plus replicator.tether.dev/copy, and its annotations without any
// tether.dev ones (so a copy is never replicated, reaped or taken for
// handled) plus replicator.tether.dev/source. When cur, the existing copy,
// is given, the result is cur updated: its other metadata (finalizers,
// owners, resourceVersion) and the tether.dev annotations other handlers
// put on it stay.
func buildCopy(src *unstructured.Unstructured, ns string, cur *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range src.Object {
		if k != "metadata" && k != "status" {
			out.Object[k] = runtime.DeepCopyJSONValue(v)
		}
	}
	if cur != nil {
		if md, ok := cur.Object["metadata"].(map[string]any); ok {
			out.Object["metadata"] = runtime.DeepCopyJSONValue(md)
		}
	}
	out.SetNamespace(ns)
	out.SetName(src.GetName())

	labels := map[string]string{}
	for k, v := range src.GetLabels() {
		labels[k] = v
	}
	labels[labelCopy] = "true"
	out.SetLabels(labels)

	anns := map[string]string{}
	for k, v := range src.GetAnnotations() {
		if !tetherAnnotation(k) && k != lastApplied {
			anns[k] = v
		}
	}
	if cur != nil {
		for k, v := range cur.GetAnnotations() {
			if tetherAnnotation(k) && !strings.HasPrefix(k, replicatorPrefix) {
				anns[k] = v
			}
		}
	}
	anns[annSource] = sourceKey(src)
	out.SetAnnotations(anns)
	return out
}

// upToDate reports whether the copy cur already is what want says: the
// same payload, labels and annotations.
func upToDate(cur, want *unstructured.Unstructured) bool {
	if !maps.Equal(cur.GetLabels(), want.GetLabels()) || !maps.Equal(cur.GetAnnotations(), want.GetAnnotations()) {
		return false
	}
	return reflect.DeepEqual(payload(cur), payload(want))
}

// payload is an object's content without apiVersion, kind, metadata and
// status, normalised through JSON so that number types do not matter.
func payload(obj *unstructured.Unstructured) any {
	p := map[string]any{}
	for k, v := range obj.Object {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
		default:
			p[k] = v
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return p
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return p
	}
	return out
}
