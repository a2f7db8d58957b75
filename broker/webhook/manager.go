package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/admission"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/kube"
)

// DefaultResync is how often Start re-applies every configuration when
// Options.Resync is zero.
const DefaultResync = time.Minute

// Options configure a Manager. Client is required. A Manager with neither
// URL nor Service can only remove configurations (the `broker release`
// case): a Sync that would write a webhook fails.
type Options struct {
	Client kube.Interface
	// Log defaults to a null logger.
	Log hclog.Logger
	// URL is the base of the broker's admission endpoint when the API server
	// reaches the broker by address (the broker runs outside the cluster):
	// an https URL without query or fragment, e.g. "https://127.0.0.1:8443".
	// A webhook's URL is URL + Paths.Path(handler, binding). Exclusive with
	// Service.
	URL string
	// Paths signs the webhooks' paths; required with URL or Service.
	Paths *admission.PathKey
	// Service is the broker's Service when the broker runs in the cluster.
	// Exclusive with URL.
	Service *Service
	// ReplicasURL and ReplicasService are URL and Service for an endpoint
	// in front of every ready replica, where a handler's webhooks point
	// when its instances keep a session to every replica (TargetEveryReplica);
	// without either, every handler's point at URL or Service. Each is
	// checked as its counterpart, and they are exclusive as those are.
	ReplicasURL     string
	ReplicasService *Service
	// CABundle returns the PEM CA bundle that verifies the admission
	// endpoint's certificate. It is called at every Sync and resync, so a
	// rotated CA is picked up; nil leaves the bundle empty (the API server
	// then trusts its system roots).
	CABundle func() []byte
	// Resync is how often Start re-applies what every handler should have,
	// repairing edits and deletions made by others; zero means
	// DefaultResync.
	Resync time.Duration
	// ExcludeUsers are let through without calling any webhook: the
	// broker's own identity, so that no handler's webhook can block the
	// broker's writes of holds and progress. Empty: none.
	ExcludeUsers []string
	// ExcludeGroups are let through without calling any webhook when the
	// request's user is in any of them, as ExcludeUsers. Empty: none.
	ExcludeGroups []string
	// ExcludeNamespaces are never sent to any webhook: every webhook's
	// namespaceSelector requires kubernetes.io/metadata.name NotIn them, on
	// top of what the binding selects, so that a webhook failing closed
	// cannot refuse the writes of the system and of the broker itself.
	// Empty: none.
	ExcludeNamespaces []string
}

// Service is where the API server reaches a broker running in the cluster.
type Service struct {
	Namespace, Name string
	// Port of the Service; zero means 443.
	Port int32
}

// Manager keeps handlers' webhook configurations in sync with their
// admission bindings.
type Manager struct {
	client kube.Interface
	log    hclog.Logger
	// leader is where webhooks send the API server by default, replicas
	// (possibly empty) where they do for TargetEveryReplica.
	leader, replicas endpoint
	paths            *admission.PathKey
	caBundle         func() []byte
	resync           time.Duration
	caChanged        chan struct{}
	// excludeUsers, excludeGroups and excludeNamespaces are Options'
	// ExcludeUsers, ExcludeGroups and ExcludeNamespaces, the namespaces
	// sorted without duplicates, so that the selector built compares equal
	// from one resync to the next.
	excludeUsers, excludeGroups []string
	excludeNamespaces           []string

	mu       sync.Mutex // guards handlers
	handlers map[string]*handlerState
}

// handlerState is what one handler's configurations should hold. Entries
// are never dropped, so a Sync and a resync of the same handler always
// serialize on the same lock.
type handlerState struct {
	mu sync.Mutex // serializes the handler's writes
	// bindings are the handler's admission bindings; empty: no
	// configuration wanted.
	bindings []*binding.Binding
	absent   bool
	// target is where the webhooks point; TargetKept until known.
	target Target
}

// New checks opts and returns a Manager; it starts nothing.
func New(opts Options) (*Manager, error) {
	if opts.Client == nil {
		return nil, errors.New("webhook: Options.Client is required")
	}
	if opts.Resync < 0 {
		return nil, fmt.Errorf("webhook: Options.Resync %v is negative", opts.Resync)
	}
	m := &Manager{
		client:    opts.Client,
		log:       opts.Log,
		paths:     opts.Paths,
		caBundle:  opts.CABundle,
		resync:    opts.Resync,
		caChanged: make(chan struct{}, 1),
		handlers:  map[string]*handlerState{},

		excludeUsers:      slices.Clone(opts.ExcludeUsers),
		excludeGroups:     slices.Clone(opts.ExcludeGroups),
		excludeNamespaces: slices.Compact(slices.Sorted(slices.Values(opts.ExcludeNamespaces))),
	}
	if m.log == nil {
		m.log = hclog.NewNullLogger()
	}
	if m.resync == 0 {
		m.resync = DefaultResync
	}
	var err error
	if m.leader, err = newEndpoint("", opts.URL, opts.Service); err != nil {
		return nil, err
	}
	if m.replicas, err = newEndpoint("Replicas", opts.ReplicasURL, opts.ReplicasService); err != nil {
		return nil, err
	}
	if !m.leader.empty() && m.paths == nil {
		return nil, errors.New("webhook: Options.Paths is required with an admission endpoint")
	}
	if m.leader.empty() && !m.replicas.empty() {
		return nil, errors.New("webhook: Options.ReplicasURL or ReplicasService needs URL or Service")
	}
	return m, nil
}

// Sync makes the handler's two configurations match its admission bindings
// (the others are ignored) and remembers them for Start's resyncs. absent
// says the handler has been absent past its grace: only STRICT bindings
// keep a webhook then, with failure policy Fail. A configuration left
// without webhooks is deleted, never left empty, so a Sync of a handler
// without (remaining) admission bindings removes its configurations. The
// Manager keeps the bindings for its resyncs and only reads them.
func (m *Manager) Sync(ctx context.Context, handler string, bindings []*binding.Binding, absent bool) error {
	return m.SyncTo(ctx, handler, bindings, absent, TargetKept)
}

// SyncTo is Sync that also says where the webhooks point: at the leader,
// or, for a handler whose instances keep a session to every replica, at
// every replica (when the Manager has an endpoint for them).
func (m *Manager) SyncTo(ctx context.Context, handler string, bindings []*binding.Binding, absent bool, target Target) error {
	if err := binding.ValidateName(handler); err != nil {
		return fmt.Errorf("syncing the webhook configurations of handler %q: name %w", handler, err)
	}
	var admission []*binding.Binding
	for _, b := range bindings {
		if b.Kind.IsAdmission() {
			admission = append(admission, b)
		}
	}
	h := m.state(handler)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bindings, h.absent = admission, absent
	if target != TargetKept {
		h.target = target
	}
	return m.applyLocked(ctx, handler, h)
}

// Remove deletes both configurations of a handler and forgets its bindings.
func (m *Manager) Remove(ctx context.Context, handler string) error {
	return m.Sync(ctx, handler, nil, false)
}

// RemoveAll deletes every configuration the broker manages, found by label,
// whichever handler it belongs to and whether or not this Manager wrote it,
// and forgets every handler's bindings. It is the broker's uninstall: call
// it once nothing calls Sync anymore. It returns what it deleted as
// "<resource>/<name>".
func (m *Manager) RemoveAll(ctx context.Context) ([]string, error) {
	m.mu.Lock()
	states := make([]*handlerState, 0, len(m.handlers))
	for _, h := range m.handlers {
		states = append(states, h)
	}
	m.mu.Unlock()
	for _, h := range states {
		h.mu.Lock()
		h.bindings, h.absent = nil, false
		h.mu.Unlock()
	}
	return m.RemoveManaged(ctx, "", false)
}

// RemoveManaged deletes the configurations the broker manages for handler
// (every handler when empty), found by label, or with dryRun only lists
// them; it tells nothing to this Manager. It is `broker release`, run with
// the broker stopped. It returns what it deleted as "<resource>/<name>".
func (m *Manager) RemoveManaged(ctx context.Context, handler string, dryRun bool) ([]string, error) {
	validating, verr := removeAll(ctx, m.log, validatingKind(m.client), handler, dryRun)
	mutating, merr := removeAll(ctx, m.log, mutatingKind(m.client), handler, dryRun)
	return append(validating, mutating...), errors.Join(verr, merr)
}

// CAChanged tells Start to re-apply every configuration now rather than at
// the next resync, so a rotated CA bundle reaches the API server before the
// old certificate expires. It never blocks; calls before the resync runs
// are coalesced.
func (m *Manager) CAChanged() {
	select {
	case m.caChanged <- struct{}{}:
	default:
	}
}

// Start re-applies every handler's configurations every Options.Resync and
// after CAChanged, until ctx ends. Failures are logged and retried at the
// next resync.
func (m *Manager) Start(ctx context.Context) error {
	t := time.NewTicker(m.resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.caChanged:
		}
		m.resyncAll(ctx)
	}
}

func (m *Manager) resyncAll(ctx context.Context) {
	m.mu.Lock()
	names := make([]string, 0, len(m.handlers))
	for name := range m.handlers {
		names = append(names, name)
	}
	m.mu.Unlock()
	sort.Strings(names)
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		h := m.state(name)
		h.mu.Lock()
		err := m.applyLocked(ctx, name, h)
		h.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			m.log.Warn("resyncing webhook configurations failed; retrying at the next resync", "handler", name, "error", err)
		}
	}
}

func (m *Manager) state(handler string) *handlerState {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.handlers[handler]
	if !ok {
		h = &handlerState{}
		m.handlers[handler] = h
	}
	return h
}

// applyLocked writes what h says; the caller holds h.mu.
func (m *Manager) applyLocked(ctx context.Context, handler string, h *handlerState) error {
	at := m.leader
	if len(h.bindings) > 0 {
		var err error
		if at, err = m.endpointLocked(ctx, handler, h); err != nil {
			return fmt.Errorf("syncing the webhook configurations of handler %q: %w", handler, err)
		}
	}
	bl := builder{handler: handler, url: at.url, service: at.service, paths: m.paths,
		excludeUsers: m.excludeUsers, excludeGroups: m.excludeGroups, excludeNamespaces: m.excludeNamespaces}
	if m.caBundle != nil {
		bl.ca = m.caBundle()
	}
	d := bl.build(h.bindings, h.absent)
	if (len(d.validating) > 0 || len(d.mutating) > 0) && at.empty() {
		return fmt.Errorf("syncing the webhook configurations of handler %q: %w", handler, errNoEndpoint)
	}
	var validating *admissionregistrationv1.ValidatingWebhookConfiguration
	if len(d.validating) > 0 {
		validating = &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: objectMeta(handler), Webhooks: d.validating}
	}
	var mutating *admissionregistrationv1.MutatingWebhookConfiguration
	if len(d.mutating) > 0 {
		mutating = &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: objectMeta(handler), Webhooks: d.mutating}
	}
	log := m.log.With("handler", handler)
	err := errors.Join(
		apply(ctx, log, validatingKind(m.client), handler, validating),
		apply(ctx, log, mutatingKind(m.client), handler, mutating),
	)
	if err != nil {
		return fmt.Errorf("syncing the webhook configurations of handler %q: %w", handler, err)
	}
	return nil
}

func objectMeta(handler string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: ConfigName(handler), Labels: configLabels(handler)}
}
