package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/tether-dev/tether/test/controlplane"
)

// The raw controller's finalizer and its "result" annotation.
const (
	rawFinalizer = "bench.example.com/raw"
	rawResult    = "bench.example.com/result"
)

// rawController is the limit: what a perfect hand-written operator does for
// the same work, one guarded JSON patch per object and phase, with the
// broker's client QPS and burst. It runs in the bench process.
type rawController struct {
	e      *env
	cancel context.CancelFunc
	wg     sync.WaitGroup
	queue  workqueue.TypedRateLimitingInterface[string]
	store  cache.Store
	client dynamic.NamespaceableResourceInterface

	mu sync.Mutex
	// wroteFrom is, per object key, the resourceVersion our last write was
	// made against: until the informer shows a newer one, there is nothing
	// to do (the write's own watch event is on its way).
	wroteFrom map[string]string
}

func newRawController(e *env) *rawController {
	return &rawController{e: e, wroteFrom: map[string]string{}}
}

func (c *rawController) name() string { return "raw" }

func (c *rawController) done(obj *unstructured.Unstructured) bool {
	_, stored := obj.GetAnnotations()[rawResult]
	return stored && slices.Contains(obj.GetFinalizers(), rawFinalizer)
}

func (c *rawController) rss() string { return "n/a (in-process)" }

// profile does nothing: the raw controller shares the bench process.
func (c *rawController) profile(context.Context, string) error { return nil }

func (c *rawController) start(ctx context.Context, ns string) (context.Context, error) {
	cfg := c.e.cp.RESTConfig()
	cfg.QPS, cfg.Burst = float32(c.e.qps), c.e.burst
	cfg.UserAgent = "tether-bench-raw"
	ownConnection(cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.client = dyn.Resource(controlplane.WidgetGVR)
	runCtx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
	inf := f.ForResource(controlplane.WidgetGVR).Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	c.store = inf.GetStore()
	f.Start(runCtx.Done())
	if !cache.WaitForCacheSync(runCtx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("raw controller: informer did not sync: %w", ctx.Err())
	}
	for range c.e.rawWorkers {
		c.wg.Go(func() {
			for c.processNext(runCtx) {
			}
		})
	}
	c.wg.Go(func() {
		<-runCtx.Done()
		c.queue.ShutDown()
	})
	return ctx, probe(ctx, c.e, ns, c.done)
}

func (c *rawController) stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	c.wg.Wait()
}

func (c *rawController) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			c.e.progressf("raw controller: %s: %v (retrying)", key, err)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync makes the one write obj needs, if any.
func (c *rawController) sync(ctx context.Context, key string) error {
	item, exists, err := c.store.GetByKey(key)
	if err != nil {
		return err
	}
	if !exists {
		c.mu.Lock()
		delete(c.wroteFrom, key)
		c.mu.Unlock()
		return nil
	}
	obj := item.(*unstructured.Unstructured)
	c.mu.Lock()
	stale := c.wroteFrom[key] == obj.GetResourceVersion()
	c.mu.Unlock()
	if stale {
		return nil
	}
	var ops []map[string]any
	fins := obj.GetFinalizers()
	i := slices.Index(fins, rawFinalizer)
	if obj.GetDeletionTimestamp() != nil {
		if i < 0 {
			return nil
		}
		path := fmt.Sprintf("/metadata/finalizers/%d", i)
		ops = append(ops, op("test", path, rawFinalizer), op("remove", path, nil))
	} else {
		_, stored := obj.GetAnnotations()[rawResult]
		if i >= 0 && stored {
			return nil
		}
		ops = append(ops, op("test", "/metadata/resourceVersion", obj.GetResourceVersion()))
		switch {
		case i >= 0:
		case len(fins) == 0:
			ops = append(ops, op("add", "/metadata/finalizers", []string{rawFinalizer}))
		default:
			ops = append(ops, op("add", "/metadata/finalizers/-", rawFinalizer))
		}
		switch {
		case stored:
		case obj.GetAnnotations() == nil:
			ops = append(ops, op("add", "/metadata/annotations", map[string]string{rawResult: `{"ok":true}`}))
		default:
			ops = append(ops, op("add", "/metadata/annotations/"+escape(rawResult), `{"ok":true}`))
		}
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	_, err = c.client.Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.JSONPatchType, data, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.wroteFrom[key] = obj.GetResourceVersion()
	c.mu.Unlock()
	return nil
}

func op(kind, path string, value any) map[string]any {
	m := map[string]any{"op": kind, "path": path}
	if kind != "remove" {
		m["value"] = value
	}
	return m
}

// escape makes s one JSON pointer token (RFC 6901).
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
