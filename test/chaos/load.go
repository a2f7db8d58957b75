package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

var (
	widgetGVR    = schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: Widgets}
	configMapGVR = schema.GroupVersionResource{Version: "v1", Resource: ConfigMaps}
)

func gvrOf(resource string) schema.GroupVersionResource {
	if resource == ConfigMaps {
		return configMapGVR
	}
	return widgetGVR
}

// load creates, updates, deletes and re-creates objects under a small pool
// of names, and plays the foreign controller: it puts its own finalizer on
// some of the objects it creates and removes it again later. Every write is
// recorded as an Op.
type load struct {
	dyn       dynamic.Interface
	namespace string
	rng       *rand.Rand
	// perSecond is the rate of writes.
	perSecond int

	mu  sync.Mutex
	ops []Op
	// live are the objects this load created and has not deleted, by
	// resource and name: their UIDs.
	live map[string]string
	// foreign are the objects that carry the foreign finalizer, by UID,
	// with when it is to be removed.
	foreign map[string]foreignHold
}

type foreignHold struct {
	resource, name string
	removeAt       time.Time
}

// The pools of names: re-creating under a name is part of the load.
const (
	widgetNames    = 30
	configMapNames = 15
)

func newLoad(dyn dynamic.Interface, namespace string, seed int64, perSecond int) *load {
	return &load{
		dyn: dyn, namespace: namespace, perSecond: perSecond,
		rng:  rand.New(rand.NewPCG(uint64(seed), 0x10ad)),
		live: map[string]string{}, foreign: map[string]foreignHold{},
	}
}

// run writes until ctx ends.
func (l *load) run(ctx context.Context) {
	t := time.NewTicker(time.Second / time.Duration(l.perSecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.step(ctx)
		l.removeDueForeign(ctx, time.Now())
	}
}

// step makes one write chosen at random: a create where the name is free,
// else an update or (less often) a delete.
func (l *load) step(ctx context.Context) {
	resource, pool := Widgets, widgetNames
	if l.rng.IntN(3) == 0 {
		resource, pool = ConfigMaps, configMapNames
	}
	name := fmt.Sprintf("%s-%02d", resource[:1], l.rng.IntN(pool))
	l.mu.Lock()
	uid, exists := l.live[resource+"/"+name]
	l.mu.Unlock()
	switch {
	case !exists:
		l.create(ctx, resource, name, l.rng.IntN(4) == 0)
	case l.rng.IntN(3) == 0:
		l.delete(ctx, resource, name, uid)
	default:
		l.update(ctx, resource, name, uid)
	}
}

func (l *load) record(op Op) {
	op.At = time.Now()
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

func (l *load) create(ctx context.Context, resource, name string, foreign bool) {
	obj := &unstructured.Unstructured{Object: map[string]any{}}
	if resource == ConfigMaps {
		obj.SetAPIVersion("v1")
		obj.SetKind("ConfigMap")
		obj.Object["data"] = map[string]any{"n": "0"}
	} else {
		obj.SetAPIVersion("test.tether.dev/v1")
		obj.SetKind("Widget")
		obj.Object["spec"] = map[string]any{"size": int64(1)}
	}
	obj.SetName(name)
	op := Op{Kind: OpCreate, Resource: resource, Namespace: l.namespace, Name: name}
	out, err := l.dyn.Resource(gvrOf(resource)).Namespace(l.namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		// Taken: the last one of that name is still being deleted.
		op.Err = err.Error()
		l.record(op)
		return
	}
	op.UID = string(out.GetUID())
	l.record(op)
	l.mu.Lock()
	l.live[resource+"/"+name] = op.UID
	l.mu.Unlock()
	if foreign {
		l.addForeign(ctx, resource, name, op.UID, time.Now().Add(time.Duration(2+l.rng.IntN(14))*time.Second))
	}
}

func (l *load) update(ctx context.Context, resource, name, uid string) {
	patch := fmt.Sprintf(`{"spec":{"size":%d}}`, l.rng.IntN(100))
	if resource == ConfigMaps {
		patch = fmt.Sprintf(`{"data":{"n":"%d"}}`, l.rng.IntN(100))
	}
	op := Op{Kind: OpUpdate, Resource: resource, Namespace: l.namespace, Name: name, UID: uid}
	if _, err := l.dyn.Resource(gvrOf(resource)).Namespace(l.namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		op.Err = err.Error()
	}
	l.record(op)
}

func (l *load) delete(ctx context.Context, resource, name, uid string) {
	op := Op{Kind: OpDelete, Resource: resource, Namespace: l.namespace, Name: name, UID: uid}
	precondition := types.UID(uid)
	err := l.dyn.Resource(gvrOf(resource)).Namespace(l.namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &precondition}})
	if err != nil {
		op.Err = err.Error()
	} else {
		l.mu.Lock()
		delete(l.live, resource+"/"+name)
		l.mu.Unlock()
	}
	l.record(op)
}

// deleteAll deletes every object the load still has, at the end of a run.
func (l *load) deleteAll(ctx context.Context) {
	l.mu.Lock()
	keys := make([]string, 0, len(l.live))
	for k := range l.live {
		keys = append(keys, k)
	}
	l.mu.Unlock()
	slices.Sort(keys)
	for _, k := range keys {
		resource, name, _ := strings.Cut(k, "/")
		l.mu.Lock()
		uid := l.live[k]
		l.mu.Unlock()
		l.delete(ctx, resource, name, uid)
	}
}

// addForeign puts the foreign finalizer on an object, with a JSON patch
// guarded by a test, as a well-behaved controller would.
func (l *load) addForeign(ctx context.Context, resource, name, uid string, removeAt time.Time) {
	op := Op{Kind: OpForeignAdd, Resource: resource, Namespace: l.namespace, Name: name, UID: uid}
	err := l.patchFinalizers(ctx, resource, name, uid, func(fins []string) ([]map[string]any, bool) {
		if slices.Contains(fins, ForeignFinalizer) {
			return nil, false
		}
		if fins == nil {
			return []map[string]any{{"op": "add", "path": "/metadata/finalizers", "value": []string{ForeignFinalizer}}}, true
		}
		return []map[string]any{{"op": "add", "path": "/metadata/finalizers/-", "value": ForeignFinalizer}}, true
	})
	if err != nil {
		op.Err = err.Error()
	} else {
		l.mu.Lock()
		l.foreign[uid] = foreignHold{resource: resource, name: name, removeAt: removeAt}
		l.mu.Unlock()
	}
	l.record(op)
}

// removeDueForeign removes the foreign finalizer where its time has come.
func (l *load) removeDueForeign(ctx context.Context, now time.Time) {
	l.mu.Lock()
	var due []string
	for uid, f := range l.foreign {
		if !now.Before(f.removeAt) {
			due = append(due, uid)
		}
	}
	l.mu.Unlock()
	slices.Sort(due)
	for _, uid := range due {
		l.removeForeign(ctx, uid)
	}
}

func (l *load) removeForeign(ctx context.Context, uid string) {
	l.mu.Lock()
	f := l.foreign[uid]
	l.mu.Unlock()
	op := Op{Kind: OpForeignRemove, Resource: f.resource, Namespace: l.namespace, Name: f.name, UID: uid}
	err := l.patchFinalizers(ctx, f.resource, f.name, uid, func(fins []string) ([]map[string]any, bool) {
		i := slices.Index(fins, ForeignFinalizer)
		if i < 0 {
			return nil, false
		}
		path := fmt.Sprintf("/metadata/finalizers/%d", i)
		return []map[string]any{{"op": "test", "path": path, "value": ForeignFinalizer}, {"op": "remove", "path": path}}, true
	})
	switch {
	case errors.Is(err, errGone):
		// Gone without the foreign controller: the checker will see it.
		op.Err = err.Error()
		l.mu.Lock()
		delete(l.foreign, uid)
		l.mu.Unlock()
	case err != nil:
		op.Err = err.Error() // tried again on the next step
	default:
		l.mu.Lock()
		delete(l.foreign, uid)
		l.mu.Unlock()
	}
	l.record(op)
}

// removeAllForeign removes the foreign finalizer everywhere, at the end of
// a run, trying each until ctx ends.
func (l *load) removeAllForeign(ctx context.Context) {
	for ctx.Err() == nil {
		l.removeDueForeign(ctx, time.Now().Add(time.Hour))
		l.mu.Lock()
		left := len(l.foreign)
		l.mu.Unlock()
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// errGone: the object is not there any more, or is another object of the
// same name.
var errGone = errors.New("the object is gone")

// patchFinalizers reads the object, asks change for a JSON patch of its
// finalizers, and applies it guarded by the resourceVersion read; a
// conflict is tried again on a fresh read, a few times.
func (l *load) patchFinalizers(ctx context.Context, resource, name, uid string, change func([]string) ([]map[string]any, bool)) error {
	ri := l.dyn.Resource(gvrOf(resource)).Namespace(l.namespace)
	var err error
	for range 3 {
		var obj *unstructured.Unstructured
		obj, err = ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return errGone
			}
			return err
		}
		if string(obj.GetUID()) != uid {
			return errGone
		}
		ops, ok := change(obj.GetFinalizers())
		if !ok {
			return nil
		}
		ops = append([]map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()}}, ops...)
		body, _ := json.Marshal(ops)
		if _, err = ri.Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{}); err == nil {
			return nil
		}
	}
	return err
}

// history returns the ops so far.
func (l *load) history() []Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}
