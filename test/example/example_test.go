package example

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
)

func exists(obj *unstructured.Unstructured) bool { return obj != nil }

// enabled are the annotations of a source, with the include and exclude
// lists when not empty.
func enabled(include, exclude string) map[string]string {
	a := map[string]string{AnnEnabled: "true", "team": "storage"}
	if include != "" {
		a[AnnInclude] = include
	}
	if exclude != "" {
		a[AnnExclude] = exclude
	}
	return a
}

// waitCopies waits for a copy of source in every target whose key equals
// value, checks each, and returns them.
func (e *env) waitCopies(t *testing.T, gvr schema.GroupVersionResource, src *unstructured.Unstructured, targets []string, key, value string) []*unstructured.Unstructured {
	t.Helper()
	source := src.GetNamespace() + "/" + src.GetName()
	var out []*unstructured.Unstructured
	for _, ns := range targets {
		c := e.waitFor(t, gvr, ns, src.GetName(), key+"="+value, func(o *unstructured.Unstructured) bool {
			return o != nil && dataOf(o, key) == value
		})
		checkCopy(t, c, source)
		out = append(out, c)
	}
	return out
}

func TestSecretIsCopiedToEveryOtherNamespaceButTheExcluded(t *testing.T) {
	t.Parallel()
	e := start(t)
	targets, excluded := e.namespaces(t, 2), e.cp.Namespace(t)
	name := "everywhere-" + randomSuffix()
	src := e.create(t, secretsGVR, object(secretsGVR, e.ns, name, enabled("", excluded), map[string]string{"password": "s3cret"}))

	// No include list: every other namespace, default included.
	for _, c := range e.waitCopies(t, secretsGVR, src, append(targets, "default"), "password", "s3cret") {
		if c.GetAnnotations()["team"] != "storage" {
			t.Errorf("copy in %s lost the source's own annotation: %v", c.GetNamespace(), c.GetAnnotations())
		}
	}
	// One sync writes every target, so the excluded one has had its turn.
	if c := e.get(t, secretsGVR, excluded, name); c != nil {
		t.Errorf("a copy exists in the excluded namespace %s", excluded)
	}
	e.waitFor(t, secretsGVR, e.ns, name, "held by "+e.handler, func(o *unstructured.Unstructured) bool {
		return o != nil && e.held(o)
	})
}

func TestIncludeListLimitsTheTargets(t *testing.T) {
	t.Parallel()
	e := start(t)
	ns := e.namespaces(t, 3) // a, b included; c not
	name := "some-" + randomSuffix()
	src := e.create(t, secretsGVR, object(secretsGVR, e.ns, name, enabled(ns[0]+", "+ns[1], ""), map[string]string{"k": "v"}))
	e.waitCopies(t, secretsGVR, src, ns[:2], "k", "v")
	if c := e.get(t, secretsGVR, ns[2], name); c != nil {
		t.Errorf("a copy exists in %s, which is not in the include list", ns[2])
	}
	if c := e.get(t, secretsGVR, "default", name); c != nil {
		t.Error("a copy exists in default, which is not in the include list")
	}
}

func TestSourceUpdateUpdatesTheCopies(t *testing.T) {
	t.Parallel()
	e := start(t)
	ns := e.namespaces(t, 2)
	name := "rotating-" + randomSuffix()
	src := e.create(t, secretsGVR, object(secretsGVR, e.ns, name, enabled(strings.Join(ns, ","), ""), map[string]string{"password": "v1"}))
	e.waitCopies(t, secretsGVR, src, ns, "password", "v1")

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := e.get(t, secretsGVR, e.ns, name)
		_ = unstructured.SetNestedField(cur.Object, b64("v2"), "data", "password")
		anns := cur.GetAnnotations()
		anns["team"] = "platform"
		cur.SetAnnotations(anns)
		_, err := e.dyn.Resource(secretsGVR).Namespace(e.ns).Update(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("updating the source: %v", err)
	}
	for _, c := range e.waitCopies(t, secretsGVR, src, ns, "password", "v2") {
		if got := c.GetAnnotations()["team"]; got != "platform" {
			t.Errorf("copy in %s: annotation team = %q, want the updated %q", c.GetNamespace(), got, "platform")
		}
	}
}

func TestReconcileRecreatesADeletedCopyAndRepairsADriftedOne(t *testing.T) {
	t.Parallel()
	e := start(t)
	ns := e.namespaces(t, 2)
	name := "kept-" + randomSuffix()
	src := e.create(t, secretsGVR, object(secretsGVR, e.ns, name, enabled(strings.Join(ns, ","), ""), map[string]string{"k": "v"}))
	copies := e.waitCopies(t, secretsGVR, src, ns, "k", "v")

	e.del(t, secretsGVR, ns[0], name)
	again := e.waitFor(t, secretsGVR, ns[0], name, "re-created by the reconcile timer", func(o *unstructured.Unstructured) bool {
		return o != nil && o.GetUID() != copies[0].GetUID()
	})
	checkCopy(t, again, e.ns+"/"+name)

	drifted := copies[1].DeepCopy()
	_ = unstructured.SetNestedField(drifted.Object, b64("tampered"), "data", "k")
	if _, err := e.dyn.Resource(secretsGVR).Namespace(ns[1]).Update(context.Background(), drifted, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("tampering with the copy: %v", err)
	}
	e.waitCopies(t, secretsGVR, src, ns[1:], "k", "v")
}

func TestDeletingTheSourceRemovesTheCopiesAndReleasesTheHold(t *testing.T) {
	t.Parallel()
	e := start(t)
	ns := e.namespaces(t, 2)
	name := "short-lived-" + randomSuffix()
	src := e.create(t, secretsGVR, object(secretsGVR, e.ns, name, enabled(strings.Join(ns, ","), ""), map[string]string{"k": "v"}))
	e.waitCopies(t, secretsGVR, src, ns, "k", "v")
	e.waitFor(t, secretsGVR, e.ns, name, "held", func(o *unstructured.Unstructured) bool { return o != nil && e.held(o) })

	e.del(t, secretsGVR, e.ns, name)
	for _, target := range ns {
		e.waitFor(t, secretsGVR, target, name, "copy removed", gone)
	}
	e.waitFor(t, secretsGVR, e.ns, name, "source gone (hold released)", gone)
}

func TestConfigMapIsReplicatedToo(t *testing.T) {
	t.Parallel()
	e := start(t)
	ns := e.namespaces(t, 2)
	name := "settings-" + randomSuffix()
	src := e.create(t, configMapsGVR, object(configMapsGVR, e.ns, name, enabled(strings.Join(ns, ","), ""), map[string]string{"mode": "fast"}))
	e.waitCopies(t, configMapsGVR, src, ns, "mode", "fast")
	e.waitFor(t, configMapsGVR, e.ns, name, "held", func(o *unstructured.Unstructured) bool { return o != nil && e.held(o) })

	e.del(t, configMapsGVR, e.ns, name)
	for _, target := range ns {
		e.waitFor(t, configMapsGVR, target, name, "copy removed", gone)
	}
	e.waitFor(t, configMapsGVR, e.ns, name, "source gone", gone)
}

func TestTTLSecretIsReapedAndNeverHeld(t *testing.T) {
	t.Parallel()
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	w, err := e.dyn.Resource(secretsGVR).Namespace(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=short"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	e.create(t, secretsGVR, object(secretsGVR, e.ns, "long", map[string]string{AnnTTL: "1h"}, nil))
	// The webhook would refuse this ttl from anyone but the broker's own
	// user, which e.create is: so the reaper meets one, as it does one
	// written while the handler was away.
	e.create(t, secretsGVR, object(secretsGVR, e.ns, "bad", map[string]string{AnnTTL: "soon"}, nil))
	created := time.Now()
	e.create(t, secretsGVR, object(secretsGVR, e.ns, "short", map[string]string{AnnTTL: "2s"}, nil))

	versions := 0
	for deleted := false; !deleted; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before the Secret was reaped")
			}
			obj, isObj := ev.Object.(*unstructured.Unstructured)
			if !isObj {
				t.Fatalf("watch error: %v", ev.Object)
			}
			versions++
			if f := obj.GetFinalizers(); len(f) > 0 {
				t.Errorf("the TTL Secret carries finalizers %v (%s)", f, ev.Type)
			}
			deleted = ev.Type == watch.Deleted
		case <-ctx.Done():
			t.Fatalf("waiting for the 2s TTL Secret to be reaped: %v", ctx.Err())
		}
	}
	// creationTimestamp has whole seconds, so the reaper may act up to 1s
	// before 2s have passed here.
	if took := time.Since(created); took < time.Second {
		t.Errorf("a Secret with ttl 2s was reaped after %v", took)
	}
	t.Logf("reaped after %v; %d versions watched, none held", time.Since(created).Round(time.Millisecond), versions)

	if obj := e.get(t, secretsGVR, e.ns, "long"); obj == nil || len(obj.GetFinalizers()) > 0 {
		t.Errorf("the 1h TTL Secret is gone or held: %v", obj)
	}
	eventually(t, "a Warning Event about the unparsable ttl", func() bool {
		for _, ev := range e.warnings(t, e.ns, "bad") {
			if strings.Contains(ev.Message, AnnTTL) && strings.Contains(ev.Message, "soon") {
				return true
			}
		}
		return false
	})
	if obj := e.get(t, secretsGVR, e.ns, "bad"); obj == nil || len(obj.GetFinalizers()) > 0 {
		t.Errorf("the Secret with a bad ttl is gone or held: %v", obj)
	}
}

func TestAnObjectThatIsNotACopyIsNeverOverwritten(t *testing.T) {
	t.Parallel()
	e := start(t)
	ns := e.namespaces(t, 2)
	name := "contested-" + randomSuffix()
	foreign := e.create(t, secretsGVR, object(secretsGVR, ns[0], name, map[string]string{"owner": "someone else"}, map[string]string{"k": "theirs"}))
	src := e.create(t, secretsGVR, object(secretsGVR, e.ns, name, enabled(strings.Join(ns, ","), ""), map[string]string{"k": "ours"}))

	e.waitCopies(t, secretsGVR, src, ns[1:], "k", "ours")
	// Both the create and the reconcile timer run into it, and say so.
	for _, binding := range []string{"create-secrets", "reconcile-secrets"} {
		eventually(t, "a Warning Event on the source from "+binding+" naming "+ns[0]+"/"+name, func() bool {
			for _, ev := range e.warnings(t, e.ns, name) {
				if strings.Contains(ev.Message, ns[0]+"/"+name) && strings.Contains(ev.Message, binding) {
					return true
				}
			}
			return false
		})
	}
	got := e.get(t, secretsGVR, ns[0], name)
	if got.GetResourceVersion() != foreign.GetResourceVersion() || dataOf(got, "k") != "theirs" || got.GetLabels()[LabelCopy] != "" {
		t.Errorf("the foreign Secret was changed: rv %s -> %s, k=%q, labels %v",
			foreign.GetResourceVersion(), got.GetResourceVersion(), dataOf(got, "k"), got.GetLabels())
	}
}
