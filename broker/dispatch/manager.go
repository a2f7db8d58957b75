package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/session"
)

// Recorder posts Kubernetes Events about objects.
type Recorder interface {
	Event(obj *unstructured.Unstructured, warning bool, reason, message string)
}

type nopRecorder struct{}

func (nopRecorder) Event(*unstructured.Unstructured, bool, string, string) {}

// Options configure a Manager. Client and Informers are required.
type Options struct {
	Log       hclog.Logger
	Client    dynamic.Interface
	Informers *informer.Registry
	// Recorder posts Events for failures and releases; nil posts none.
	Recorder Recorder
	// Workers is the number of workers per handler (default 64). In-flight
	// deliveries are bounded by the instances' windows, not by this.
	Workers int
	// MaxRawEvents bounds the raw watch events queued per object for event
	// bindings (default 256); beyond it the oldest are dropped, with a log.
	MaxRawEvents int
}

// Manager owns one runtime per handler name.
type Manager struct {
	opts Options
	log  hclog.Logger

	mu       sync.Mutex
	ctx      context.Context
	handlers map[string]*runtime
}

// New returns a Manager; Start runs it.
func New(opts Options) *Manager {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Recorder == nil {
		opts.Recorder = nopRecorder{}
	}
	if opts.Workers <= 0 {
		opts.Workers = 64
	}
	if opts.MaxRawEvents <= 0 {
		opts.MaxRawEvents = 256
	}
	return &Manager{opts: opts, log: opts.Log, handlers: map[string]*runtime{}}
}

// Start runs until ctx ends, then stops every handler's workers.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	handlers := m.handlers
	m.handlers = map[string]*runtime{}
	m.mu.Unlock()
	for _, rt := range handlers {
		rt.stop()
	}
	return nil
}

// errNotStarted is returned by Attach before Start.
var errNotStarted = errors.New("dispatcher not started")

// Attach adds an instance to its handler, creating the handler's runtime on
// first use. Every instance of a handler must declare the same bindings; a
// handler whose instances are all gone may come back with new ones.
func (m *Manager) Attach(_ context.Context, in *session.Instance, bindings []*binding.Binding) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil {
		return nil, errNotStarted
	}
	fp := binding.Fingerprint(bindings)
	rt := m.handlers[in.Handler]
	if rt != nil && rt.fingerprint != fp {
		if n := rt.instanceCount(); n > 0 {
			return nil, fmt.Errorf("its bindings differ from those of the %d connected instance(s); stop them first", n)
		}
		rt.stop()
		rt = nil
	}
	if rt == nil {
		var err error
		if rt, err = m.startRuntime(in.Handler, bindings, fp); err != nil {
			return nil, err
		}
		m.handlers[in.Handler] = rt
	}
	rt.addInstance(in)
	return func() { rt.removeInstance(in) }, nil
}

func (m *Manager) startRuntime(name string, bindings []*binding.Binding, fp string) (*runtime, error) {
	rt := newRuntime(m, name, bindings, fp)
	if err := rt.start(m.ctx); err != nil {
		return nil, fmt.Errorf("starting handler %q: %w", name, err)
	}
	return rt, nil
}
