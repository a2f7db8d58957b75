package raw

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/tether-dev/tether/test/bench/workload"
	"github.com/tether-dev/tether/test/controlplane"
)

// The controller's finalizer, its "result" annotation and the user agent of
// its requests.
const (
	Finalizer        = "bench.example.com/raw"
	ResultAnnotation = "bench.example.com/result"
	UserAgent        = "tether-bench-raw"
)

// Defaults for the zero fields of Options: the bench's (and the broker's)
// QPS and burst, and the bench's -raw-workers.
const (
	DefaultQPS     = 100
	DefaultBurst   = 200
	DefaultWorkers = 64
)

// Options configure a Controller; the zero value serves every namespace
// with the defaults above and logs with the standard logger.
type Options struct {
	// Workload is what a new Widget gets besides the finalizer (one of
	// workload.All; workload.Result when empty). With workload.Status the
	// finalizer's patch cannot carry it: the API server ignores status in
	// writes to the object and everything but status in writes to
	// /status.
	Workload string
	// Namespace whose Widgets are handled; "" for all namespaces.
	Namespace string
	// QPS and Burst of the controller's client (DefaultQPS, DefaultBurst
	// when zero), as the broker's --kube-api-qps and --kube-api-burst.
	QPS   float64
	Burst int
	// Workers is how many objects are synced at once (DefaultWorkers when
	// zero).
	Workers int
	// Logf reports a failed sync (retried); nil: log.Printf.
	Logf func(format string, args ...any)
}

// Controller is the raw controller; make it with New and run it with Start.
type Controller struct {
	opts   Options
	dyn    dynamic.Interface
	client dynamic.NamespaceableResourceInterface
	queue  workqueue.TypedRateLimitingInterface[string]
	store  cache.Store

	mu sync.Mutex
	// wrote is, per object key, the resourceVersions our last sync wrote
	// against or made on the way (the finalizer's patch before a status
	// write): until the informer shows another one, there is nothing to do
	// (the last write's own watch event is on its way).
	wrote map[string][]string
}

// New makes a Controller that talks to the API server of cfg (which it does
// not modify) with its own connection.
func New(cfg *rest.Config, opts Options) (*Controller, error) {
	if opts.QPS == 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst == 0 {
		opts.Burst = DefaultBurst
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Workload == "" {
		opts.Workload = workload.Result
	}
	if err := workload.Check(opts.Workload); err != nil {
		return nil, fmt.Errorf("raw controller: %w", err)
	}
	if opts.Logf == nil {
		opts.Logf = log.Printf
	}
	if opts.QPS < 0 || opts.Burst < 0 || opts.Workers < 0 {
		return nil, fmt.Errorf("raw controller: QPS %g, burst %d and workers %d must not be negative", opts.QPS, opts.Burst, opts.Workers)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(opts.QPS), opts.Burst
	cfg.UserAgent = UserAgent
	// A connection of its own: client-go otherwise shares one HTTP/2
	// connection between every client of the process with the same TLS
	// settings, and the controller would queue behind the others (in the
	// bench, once, behind its load generator).
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("raw controller: making the client: %w", err)
	}
	return &Controller{opts: opts, dyn: dyn, client: dyn.Resource(controlplane.WidgetGVR), wrote: map[string][]string{}}, nil
}

// Done reports whether the controller has finished creating obj for
// workload: it holds the finalizer and has what workload writes.
func Done(obj *unstructured.Unstructured, work string) bool {
	return slices.Contains(obj.GetFinalizers(), Finalizer) && hasWork(obj, work)
}

// hasWork reports whether obj has what workload writes besides the
// finalizer.
func hasWork(obj *unstructured.Unstructured, work string) bool {
	switch work {
	case workload.Label:
		_, ok := obj.GetLabels()[workload.LabelKey]
		return ok
	case workload.Status:
		handled, _, _ := unstructured.NestedBool(obj.Object, "status", workload.StatusField)
		return handled
	}
	_, ok := obj.GetAnnotations()[ResultAnnotation]
	return ok
}

// Start runs the controller until ctx ends, then waits for its workers and
// returns nil; it returns an error only when it cannot start. Call it once.
func (c *Controller) Start(ctx context.Context) error {
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.dyn, 0, c.opts.Namespace, nil)
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
		return fmt.Errorf("raw controller: adding the event handler: %w", err)
	}
	c.store = inf.GetStore()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer f.Shutdown()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		c.queue.ShutDown()
		return nil // ctx ended first
	}
	for range c.opts.Workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			c.opts.Logf("raw controller: %s: %v (retrying)", key, err)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync makes the writes obj needs, if any: the guarded JSON patch, then
// for WorkloadStatus the status write.
func (c *Controller) sync(ctx context.Context, key string) error {
	item, exists, err := c.store.GetByKey(key)
	if err != nil {
		return err
	}
	if !exists {
		c.mu.Lock()
		delete(c.wrote, key)
		c.mu.Unlock()
		return nil
	}
	obj := item.(*unstructured.Unstructured)
	c.mu.Lock()
	stale := slices.Contains(c.wrote[key], obj.GetResourceVersion())
	c.mu.Unlock()
	if stale {
		return nil
	}
	wrote := []string{obj.GetResourceVersion()}
	if ops := patch(obj, c.opts.Workload); ops != nil {
		data, err := json.Marshal(ops)
		if err != nil {
			return fmt.Errorf("encoding the patch: %w", err)
		}
		out, err := c.client.Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.JSONPatchType, data, metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		wrote = append(wrote, out.GetResourceVersion())
	}
	if needsStatus(obj, c.opts.Workload) {
		data := []byte(`{"status":{"` + workload.StatusField + `":true}}`)
		_, err := c.client.Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.MergePatchType, data, metav1.PatchOptions{}, "status")
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			if len(wrote) > 1 {
				// The finalizer's patch landed: the informer showing
				// its state brings the retry, which writes status only.
				c.remember(key, wrote[:1])
			}
			return fmt.Errorf("writing status: %w", err)
		}
	} else if len(wrote) == 1 {
		return nil // nothing written
	}
	c.remember(key, wrote)
	return nil
}

// remember records the resourceVersions sync must not act on again.
func (c *Controller) remember(key string, rvs []string) {
	c.mu.Lock()
	c.wrote[key] = rvs
	c.mu.Unlock()
}

// needsStatus reports whether obj, live, still needs the status write of
// workload.
func needsStatus(obj *unstructured.Unstructured, work string) bool {
	return work == workload.Status && obj.GetDeletionTimestamp() == nil && !hasWork(obj, work)
}

// patch is the JSON patch obj needs, or nil when it needs none: on a live
// object, a test of its resourceVersion and the adds of the finalizer and
// of the result or the label (work) that are missing; on an object
// being deleted, a test and the removal of the finalizer.
func patch(obj *unstructured.Unstructured, work string) []map[string]any {
	fins := obj.GetFinalizers()
	i := slices.Index(fins, Finalizer)
	if obj.GetDeletionTimestamp() != nil {
		if i < 0 {
			return nil
		}
		path := fmt.Sprintf("/metadata/finalizers/%d", i)
		return []map[string]any{op("test", path, Finalizer), op("remove", path, nil)}
	}
	// Status goes in a write of its own (needsStatus).
	stored := work == workload.Status || hasWork(obj, work)
	if i >= 0 && stored {
		return nil
	}
	ops := []map[string]any{op("test", "/metadata/resourceVersion", obj.GetResourceVersion())}
	switch {
	case i >= 0:
	case len(fins) == 0:
		ops = append(ops, op("add", "/metadata/finalizers", []string{Finalizer}))
	default:
		ops = append(ops, op("add", "/metadata/finalizers/-", Finalizer))
	}
	if stored {
		return ops
	}
	field, key, value := "annotations", ResultAnnotation, `{"ok":true}`
	existing := obj.GetAnnotations()
	if work == workload.Label {
		field, key, value, existing = "labels", workload.LabelKey, "true", obj.GetLabels()
	}
	if existing == nil {
		return append(ops, op("add", "/metadata/"+field, map[string]string{key: value}))
	}
	return append(ops, op("add", "/metadata/"+field+"/"+escape(key), value))
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
