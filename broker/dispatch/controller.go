package dispatch

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/broker/session"
	"github.com/tether-dev/tether/broker/timer"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// controller is one handler's controller: it feeds the queue from the
// informers, the instances, the timers and the daemons' exits, and runs
// the workers that hand each queued object to the reconciler. Its parts
// share the handler.
type controller struct {
	*handler
	fingerprint string

	queue      workqueue.TypedRateLimitingInterface[types.UID]
	subs       []subscription
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	reconciler *reconciler
	reviews    *reviews
	sweeper    *sweeper
	stuck      *stuckScan
}

// newController makes the controller of a handler; sweep are the scopes it
// dropped that are still to be swept of its holds.
func newController(m *Manager, name string, bindings []*binding.Binding, fp string, sweep []presence.Scope) *controller {
	// Index bindings are each session's own stream (package index), not
	// the handler's shared work.
	bindings = slices.DeleteFunc(slices.Clone(bindings), func(b *binding.Binding) bool { return b.Kind == binding.Index })
	h := newHandler(&m.opts, m.log.Named("handler").With("handler", name), name, bindings)
	rt := &controller{handler: h, fingerprint: fp}
	dl := &deliverer{handler: h, send: (*session.Instance).DeliverUnless}
	rt.reconciler = &reconciler{handler: h, deliver: dl, writer: h.writes,
		events: &rawEvents{handler: h, deliver: dl}, timers: &timers{handler: h, deliver: dl}, daemons: &daemons{handler: h, deliver: dl}}
	rt.reviews = &reviews{handler: h, deliver: dl}
	if !m.opts.NoPushdown {
		sweep = append(slices.Clone(sweep), pushdownScopes(bindings)...)
	}
	rt.sweeper = &sweeper{handler: h, scopes: sweep}
	rt.stuck = &stuckScan{handler: h}
	h.presence = &presenceKeeper{
		handler: h, accepting: m.acceptingSince, sweeping: rt.sweeper.remaining, stuck: rt.stuck.stuck,
		changed: rt.requeueAll, sample: rt.sampleQueue, wake: make(chan struct{}, 1),
	}
	rt.sweeper.swept = h.presence.poke
	h.writes.recorded = h.presence.recorded
	return rt
}

// start subscribes to the informers the bindings need and starts workers.
func (rt *controller) start(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	rt.cancel = cancel
	rt.sched = timer.New(rt.fire, rt.clock)
	rt.wg.Go(func() { _ = rt.sched.Start(ctx) })
	rt.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[types.UID](),
		workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "handler-" + rt.name, Clock: rt.clock, MetricsProvider: rt.opts.Metrics.QueueMetrics(rt.name)},
	)
	for _, key := range informerKeys(rt.bindings, !rt.opts.NoPushdown) {
		res := rt.byResource[key.Resource][0].Resource
		sub, err := rt.opts.Informers.Subscribe(key, rt.eventHandler(&res, key.Labels != ""))
		if err != nil {
			rt.stop()
			return err
		}
		rt.mu.Lock()
		rt.subs = append(rt.subs, subscription{sub, &res})
		rt.mu.Unlock()
	}
	for range rt.opts.Workers {
		rt.wg.Go(func() {
			for rt.processNext(ctx) {
			}
		})
	}
	rt.wg.Go(func() { rt.presence.run(ctx) })
	rt.wg.Go(func() { rt.sweeper.run(ctx) })
	rt.wg.Go(func() { rt.stuck.run(ctx) })
	// Shut the queue down when ctx ends so idle workers return from Get.
	rt.wg.Go(func() {
		<-ctx.Done()
		rt.queue.ShutDown()
	})
	return nil
}

// stop ends the workers and the subscriptions and waits for the workers.
func (rt *controller) stop() {
	for _, s := range rt.subs {
		s.Unsubscribe()
	}
	// lookAgain, on the presence keeper's goroutine, reads them until
	// that ends below.
	rt.mu.Lock()
	rt.subs = nil
	rt.mu.Unlock()
	if rt.cancel != nil {
		rt.cancel()
	}
	rt.wg.Wait()
	// Its binding ids may not come back, and a broker that stopped
	// leading samples nothing.
	rt.opts.Metrics.ForgetHandler(rt.name)
}

// subscription is one of the controller's informers, with the resource of the
// objects it brings.
type subscription struct {
	*informer.Subscription
	res *resource.Resource
}

// informerKeys picks one informer per resource: the whole cluster when any
// binding of the resource is unscoped, else one per named namespace; with
// push, filtered by the label selector all the bindings of the resource
// share (binding.Pushdown).
func informerKeys(bs []*binding.Binding, push bool) []informer.Key {
	bs = slices.DeleteFunc(slices.Clone(bs), func(b *binding.Binding) bool { return b.Kind.IsAdmission() })
	cluster := map[schema.GroupVersionResource]bool{}
	for _, b := range bs {
		if len(b.Namespaces) == 0 {
			cluster[b.Resource.GroupVersionResource] = true
		}
	}
	pushed := map[schema.GroupVersionResource]string{}
	if push {
		for _, b := range bs {
			gvr := b.Resource.GroupVersionResource
			if _, ok := pushed[gvr]; !ok {
				pushed[gvr] = binding.Pushdown(bs, gvr).String()
			}
		}
	}
	seen := map[informer.Key]bool{}
	var keys []informer.Key
	add := func(k informer.Key) {
		k.Labels = pushed[k.Resource]
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, b := range bs {
		gvr := b.Resource.GroupVersionResource
		if cluster[gvr] {
			add(informer.Key{Resource: gvr})
			continue
		}
		for _, ns := range b.Namespaces {
			add(informer.Key{Resource: gvr, Namespace: ns})
		}
	}
	return keys
}

// eventHandler feeds the controller what an informer sees. A filtered
// informer (a label selector pushed down) says "deleted" also of an object
// that only stopped matching: that is an exit, which the next pass tells
// from a deletion (confirmExit).
func (rt *controller) eventHandler(res *resource.Resource, filtered bool) cache.ResourceEventHandler {
	deleted := watchDeleted
	if filtered {
		deleted = watchExited
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if c, ok := obj.(*informer.Object); ok {
				rt.observe(res, c, watchAdded, initial)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			c, ok := obj.(*informer.Object)
			if !ok {
				return
			}
			// After a watch gap, a relist turns X deleted and X' created
			// under the same name into one update: X is gone (rule 5).
			if prev, ok := oldObj.(*informer.Object); ok && prev.UID != c.UID {
				rt.observe(res, prev, watchDeleted, false)
				rt.observe(res, c, watchAdded, false)
				return
			}
			rt.observe(res, c, watchModified, false)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if c, ok := obj.(*informer.Object); ok {
				rt.observe(res, c, deleted, false)
			}
		},
	}
}

// observe records what an informer saw and enqueues the object. It runs on
// the informer's goroutine, so it only records and enqueues.
func (rt *controller) observe(res *resource.Resource, c *informer.Object, typ string, initial bool) {
	uid := c.UID
	rt.mu.Lock()
	o := rt.objects[uid]
	if o == nil {
		o = &object{uid: uid, res: res}
		rt.objects[uid] = o
	}
	o.see(c, typ, initial, rt.hasEventBindings(res.GroupVersionResource), rt.opts.MaxRawEvents, rt.clock.Now(), rt.log)
	rt.noteSeen(uid, typ)
	seen := o.seen // nil between passes: a send on it is never ready
	rt.mu.Unlock()
	select {
	case seen <- struct{}{}:
	default:
	}
	rt.queue.Add(uid)
}

func (rt *controller) hasEventBindings(gvr schema.GroupVersionResource) bool {
	for _, b := range rt.byResource[gvr] {
		if b.Kind == binding.Event {
			return true
		}
	}
	return false
}

// addInstance makes an instance eligible for deliveries. When it is the
// handler's first (the handler returned), every known object is looked at
// again as part of an initial list, so resume bindings fire.
func (rt *controller) addInstance(in *session.Instance) {
	in.OnDaemonExited(func(m *tetherv1.DaemonExited) { rt.daemonExited(in, m) })
	if rt.presence.join(in) {
		rt.lookAgain(true)
		return
	}
	rt.mu.Lock()
	var uids []types.UID
	for uid, o := range rt.objects {
		if len(o.daemons) > 0 {
			// A joining instance may now own the object (every object, when
			// its priority is above the others'): its daemon moves.
			uids = append(uids, uid)
		}
	}
	rt.mu.Unlock()
	for _, uid := range uids {
		rt.queue.Add(uid)
	}
}

// removeInstance stops deliveries to an instance. Its daemons ended with
// its session, so their objects are looked at again to start them on the
// next owner.
func (rt *controller) removeInstance(in *session.Instance) {
	rt.presence.leave(in)
	rt.mu.Lock()
	var uids []types.UID
	for uid, o := range rt.objects {
		for _, d := range o.daemons {
			if d.inst == in {
				uids = append(uids, uid)
				break
			}
		}
	}
	rt.mu.Unlock()
	for _, uid := range uids {
		rt.queue.Add(uid)
	}
}

// fire runs on the scheduler's goroutine when a tick or restart is due.
func (rt *controller) fire(key timer.Key, due time.Time) {
	rt.mu.Lock()
	o := rt.objects[key.UID]
	if o != nil {
		o.due.set(key.Name, due)
	}
	rt.mu.Unlock()
	if o != nil {
		rt.queue.Add(key.UID)
	}
}

// daemonExited runs on a session's receive goroutine when a daemon returned
// by itself.
func (rt *controller) daemonExited(in *session.Instance, m *tetherv1.DaemonExited) {
	uid := types.UID(m.GetUid())
	rt.mu.Lock()
	o := rt.objects[uid]
	keep := o != nil && o.wantsExit(rt.bindingsOf(o), in, m.GetBindingId())
	if keep {
		o.exits = append(o.exits, daemonExit{inst: in, msg: m})
	}
	rt.mu.Unlock()
	if keep {
		rt.queue.Add(uid)
	}
}

// processNext handles one queued object; false when the queue shut down.
func (rt *controller) processNext(ctx context.Context) bool {
	uid, shutdown := rt.queue.Get()
	if shutdown {
		return false
	}
	defer rt.queue.Done(uid)
	rt.sampleQueue()
	res := rt.reconciler.reconcile(ctx, uid)
	switch {
	case ctx.Err() != nil:
	case res.cut != notCut:
		// Looked at again when the handler returns, or at once: the
		// informer's notification queued the object again.
		rt.queue.Forget(uid)
	case res.err != nil:
		rt.log.Debug("object requeued", "uid", uid, "error", res.err)
		rt.queue.AddRateLimited(uid)
	case res.after > 0:
		rt.queue.Forget(uid)
		rt.queue.AddAfter(uid, res.after)
	default:
		rt.queue.Forget(uid)
		if !rt.rest(uid) {
			rt.queue.AddAfter(uid, outsideAgain)
		}
	}
	return true
}

// outsideAgain is how soon an object outside the informers' selector that
// is not at rest is looked at again: no notification will come for it.
const outsideAgain = 5 * time.Second

// rest forgets an object whose pass left nothing under way or scheduled:
// at rest, it costs only its cache entry. A notification, or lookAgain,
// makes it anew from the cache. It is false for an object outside the
// informers' selector that is not at rest yet.
func (rt *controller) rest(uid types.UID) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	o := rt.objects[uid]
	if o == nil {
		return true
	}
	if o.atRest() {
		delete(rt.objects, uid)
		return true
	}
	return !o.outside
}

// requeueAll has every object looked at again.
func (rt *controller) requeueAll() { rt.lookAgain(false) }

// lookAgain queues every object of the handler: those it keeps state for
// and those at rest in its informers' caches, made anew. initial marks them
// part of an initial list (the handler returned), so resume bindings fire.
func (rt *controller) lookAgain(initial bool) {
	now := rt.clock.Now()
	// The caches are listed under the controller's lock, which a notification
	// takes too: an object listed here and deleted meanwhile has its
	// deletion seen after it is made, never before.
	rt.mu.Lock()
	for _, s := range rt.subs {
		for _, item := range s.Store().List() {
			c, ok := item.(*informer.Object)
			if !ok || rt.objects[c.UID] != nil {
				continue
			}
			o := &object{uid: c.UID, res: s.res}
			o.see(c, watchModified, false, false, 0, now, rt.log)
			rt.objects[c.UID] = o
		}
	}
	uids := make([]types.UID, 0, len(rt.objects))
	for uid, o := range rt.objects {
		if initial {
			o.initial = true
		}
		uids = append(uids, uid)
	}
	rt.mu.Unlock()
	for _, uid := range uids {
		rt.queue.Add(uid)
	}
}
