package informer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/tether-dev/tether/broker/metrics"
)

// Options configure a Registry. The zero value is not usable: Client is
// required.
type Options struct {
	// Client lists and watches objects (NewClient makes one).
	Client rest.Interface
	// Log defaults to a null logger.
	Log hclog.Logger
	// Resync is the informers' resync period; zero means none.
	Resync time.Duration
	// Metrics counts the informers' lists; nil counts nothing.
	Metrics *metrics.Metrics
}

// Key names one shared informer.
type Key struct {
	Resource schema.GroupVersionResource
	// Namespace is "" for the whole cluster.
	Namespace string
	// Labels is the label selector the API server filters the informer's
	// lists and watches by; "" for none. An object that stops matching it
	// leaves the cache as if deleted (binding.Pushdown says why that is
	// safe, package dispatch how it is told from a deletion).
	Labels string
}

func (k Key) String() string {
	s := k.Resource.String()
	if k.Namespace != "" {
		s += " in " + k.Namespace
	}
	if k.Labels != "" {
		s += " labelled " + k.Labels
	}
	return s
}

// Registry owns the shared informers.
type Registry struct {
	opts Options
	log  hclog.Logger

	started chan struct{} // closed by Start

	mu      sync.Mutex
	ctx     context.Context // set by Start; informers run under it
	entries map[Key]*entry
}

type entry struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	done     chan struct{}
	refs     int
}

// ErrNotStarted is returned by Subscribe before Start.
var ErrNotStarted = errors.New("informer registry not started")

// New returns a Registry; Start runs it.
func New(opts Options) *Registry {
	log := opts.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Registry{opts: opts, log: log, started: make(chan struct{}), entries: map[Key]*entry{}}
}

// Started is closed once Start runs: from then on Subscribe works.
func (r *Registry) Started() <-chan struct{} { return r.started }

// Start lets informers run until ctx ends, then waits for them to stop.
func (r *Registry) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	close(r.started)
	<-ctx.Done()
	r.mu.Lock()
	entries := r.entries
	r.entries = map[Key]*entry{}
	r.mu.Unlock()
	for _, e := range entries {
		<-e.done
	}
	return nil
}

// Subscription is one handler's registration on a shared informer.
type Subscription struct {
	r   *Registry
	key Key
	reg cache.ResourceEventHandlerRegistration
	inf cache.SharedIndexInformer
}

// HasSynced reports whether the subscriber has been given the initial list.
func (s *Subscription) HasSynced() bool { return s.reg.HasSynced() }

// Store is the informer's cache; its objects must not be mutated.
func (s *Subscription) Store() cache.Store { return s.inf.GetStore() }

// Subscribe adds h to the informer for key, starting it if needed. h gets an
// add for every object already in the cache, with isInInitialList set.
func (r *Registry) Subscribe(key Key, h cache.ResourceEventHandler) (*Subscription, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil {
		return nil, ErrNotStarted
	}
	if r.ctx.Err() != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", key, r.ctx.Err())
	}
	e, ok := r.entries[key]
	if !ok {
		e = r.start(key)
		r.entries[key] = e
	}
	reg, err := e.informer.AddEventHandler(h)
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", key, err)
	}
	e.refs++
	return &Subscription{r: r, key: key, reg: reg, inf: e.informer}, nil
}

// Unsubscribe removes the subscription and stops the informer when it was
// the last one.
func (s *Subscription) Unsubscribe() {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = s.inf.RemoveEventHandler(s.reg)
	e, ok := r.entries[s.key]
	if !ok || e.informer != s.inf {
		return
	}
	if e.refs--; e.refs == 0 {
		e.cancel()
		delete(r.entries, s.key)
		r.log.Debug("informer stopped", "informer", s.key.String())
	}
}

func (r *Registry) start(key Key) *entry {
	listed := func() { r.opts.Metrics.API().Listed(metrics.Resource(key.Resource.GroupResource())) }
	inf := cache.NewSharedIndexInformer(listWatch(r.opts.Client, key, listed), &Object{}, r.opts.Resync, cache.Indexers{})
	ctx, cancel := context.WithCancel(r.ctx)
	e := &entry{informer: inf, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		inf.RunWithContext(ctx)
	}()
	r.log.Debug("informer started", "informer", key.String())
	return e
}

// Cached sums the caches by resource, over every namespace watched. It
// holds the registry's lock only to copy the list of informers: walking
// their objects under it would hold up every Subscribe and Unsubscribe
// (handlers connecting and leaving) for as long as a scrape takes.
func (r *Registry) Cached() map[schema.GroupVersionResource]metrics.CacheUsage {
	type informer struct {
		resource schema.GroupVersionResource
		store    cache.Store
	}
	r.mu.Lock()
	informers := make([]informer, 0, len(r.entries))
	for key, e := range r.entries {
		informers = append(informers, informer{key.Resource, e.informer.GetStore()})
	}
	r.mu.Unlock()
	out := map[schema.GroupVersionResource]metrics.CacheUsage{}
	for _, inf := range informers {
		u := out[inf.resource]
		for _, obj := range inf.store.List() {
			u.Objects++
			if o, ok := obj.(*Object); ok {
				u.Bytes += o.Size()
			}
		}
		out[inf.resource] = u
	}
	return out
}
