package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// watcher records every state of the load's objects that its own watch
// (straight to the API server, past every fault proxy) shows.
type watcher struct {
	mu  sync.Mutex
	obs []Observation
}

// start runs informers on the load's resources in namespace until ctx ends
// and returns once they have synced.
func (w *watcher) start(ctx context.Context, dyn dynamic.Interface, namespace string) error {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, namespace, nil)
	for _, res := range []string{Widgets, ConfigMaps} {
		inf := f.ForResource(gvrOf(res)).Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { w.see(res, obj, false) },
			UpdateFunc: func(old, obj any) {
				// A relist after a gap shows X deleted and X' created under
				// the same name as one update.
				if o, ok := old.(*unstructured.Unstructured); ok {
					if n, ok := obj.(*unstructured.Unstructured); ok && o.GetUID() != n.GetUID() {
						w.see(res, o, true)
					}
				}
				w.see(res, obj, false)
			},
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				w.see(res, obj, true)
			},
		}); err != nil {
			return fmt.Errorf("watching %s: %w", res, err)
		}
	}
	f.Start(ctx.Done())
	for gvr, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("watching %s: the cache did not sync", gvr.Resource)
		}
	}
	return nil
}

func (w *watcher) see(resource string, obj any, gone bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	o := Observation{
		At: time.Now(), Resource: resource, Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()),
		ResourceVersion: u.GetResourceVersion(), Finalizers: u.GetFinalizers(), Deleting: u.GetDeletionTimestamp() != nil, Gone: gone,
	}
	w.mu.Lock()
	w.obs = append(w.obs, o)
	w.mu.Unlock()
}

func (w *watcher) history() []Observation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.obs)
}

// finalState lists the load's objects as they are now.
func finalState(ctx context.Context, dyn dynamic.Interface, namespace string) ([]Object, error) {
	var out []Object
	for _, res := range []string{Widgets, ConfigMaps} {
		list, err := dyn.Resource(gvrOf(res)).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", res, err)
		}
		for _, u := range list.Items {
			if res == ConfigMaps && u.GetName() == "kube-root-ca.crt" {
				continue // not the load's
			}
			o := Object{Resource: res, Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()), Finalizers: u.GetFinalizers()}
			if ts := u.GetDeletionTimestamp(); ts != nil {
				o.Deleting, o.DeletingSince = true, ts.Time
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// events lists the Events about the load's objects.
func events(ctx context.Context, client kubernetes.Interface, namespace string) ([]Event, error) {
	list, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the events: %w", err)
	}
	out := make([]Event, 0, len(list.Items))
	for _, e := range list.Items {
		out = append(out, Event{At: eventTime(e), UID: string(e.InvolvedObject.UID), Reason: e.Reason, Message: e.Message})
	}
	return out, nil
}

// eventTime is when an Event happened, from whichever of its times is set.
func eventTime(e corev1.Event) time.Time {
	for _, t := range []time.Time{e.EventTime.Time, e.FirstTimestamp.Time, e.LastTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return e.CreationTimestamp.Time
}
