package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/session"
	"github.com/tether-dev/tether/broker/webhook"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Recorder posts Kubernetes Events about objects.
type Recorder interface {
	Event(obj *unstructured.Unstructured, warning bool, reason, message string)
}

type nopRecorder struct{}

func (nopRecorder) Event(*unstructured.Unstructured, bool, string, string) {}

// Webhooks keeps each handler's admission webhook configurations
// (broker/webhook): all its validate and mutate bindings while it is
// present or in its grace, only the STRICT ones once it is absent past its
// grace; pointing at the leader, or at every replica (target).
type Webhooks interface {
	SyncTo(ctx context.Context, handler string, bindings []*binding.Binding, absent bool, target webhook.Target) error
}

// Options configure a Manager. Client and Informers are required.
type Options struct {
	Log    hclog.Logger
	Client dynamic.Interface
	// Writer, when set, is a client made by informer.NewClient that the
	// writes go through instead of Client, so that the API server's
	// answer is read straight into its cached form (patch, informer.Read).
	Writer rest.Interface
	// ActAs returns a client (made by informer.NewClient) that writes as
	// user, for the writes that carry a handler's patch; nil writes
	// everything as the broker (insecure mode, tests).
	ActAs     func(user authenticationv1.UserInfo) (rest.Interface, error)
	Informers *informer.Registry
	// Recorder posts Events for failures and releases; nil posts none.
	Recorder Recorder
	// HandlerEvents posts the Events handlers put in their acks; nil
	// posts none.
	HandlerEvents HandlerEvents
	// Workers is the number of workers per handler (default 64). In-flight
	// deliveries are bounded by the instances' windows, not by this.
	Workers int
	// MaxRawEvents bounds the raw watch events queued per object for event
	// bindings (default 256); beyond it the oldest are dropped, with a log.
	MaxRawEvents int
	// Clock is what graces, timers, retries and pacing count time by; nil
	// is the real clock. Deadlines sent with deliveries are always wall
	// clock: they end the contexts of real calls.
	Clock clock.WithTicker

	// Presence records handlers in Leases; nil records nothing, and then a
	// restarted broker forgets absent handlers.
	Presence *presence.Store
	// Identity names this broker in the Leases it writes.
	Identity string
	// Absence holds the grace and long-absence limits.
	Absence AbsenceLimits
	// Compile validates bindings; it restores handlers from their Leases.
	Compile func(ctx context.Context, bindings []*tetherv1.Binding) ([]*binding.Binding, error)
	// Reauthorize re-checks, before a handler is restored from its Lease,
	// that the identity the Lease records has the rights a Hello with
	// bindings needs (auth.Authenticator.AuthorizeRecorded): an error
	// wrapping auth.ErrDenied leaves the handler unrestored
	// (reauthorize.go), any other is retried. nil checks nothing
	// (insecure mode, where no identity is recorded).
	Reauthorize func(ctx context.Context, handler string, user presence.User, bindings []*binding.Binding) error
	// ReleaseLimiter paces the writes that strip holds from live objects of
	// a long-absent handler (default DefaultReleaseQPS, in bursts of
	// ReleaseBurst).
	ReleaseLimiter *WriteLimiter
	// WriteLimiter paces every write to the objects (default
	// DefaultWriteQPS, in bursts of DefaultWriteBurst) without holding up
	// deliveries that write nothing;
	// Client should then have no rate limit of its own.
	WriteLimiter *WriteLimiter
	// StuckAfter is how long a hold may stay on an object being deleted
	// before it is stuck: a HoldStuck Event, a line in `broker status`
	// (default contract.DefaultStuckAfter).
	StuckAfter time.Duration
	// Metrics records what the handlers do; nil records nothing.
	Metrics *metrics.Metrics
	// Tracer makes a trace of every pass over an object that delivers or
	// writes (trace.go); nil traces nothing, at no cost.
	Tracer trace.Tracer
	// Webhooks keeps the handlers' webhook configurations; nil keeps none
	// (the broker serves no admission).
	Webhooks Webhooks
	// NoPushdown makes the informers list and watch every object of a
	// bound resource, not only those the label selector shared by all of a
	// handler's bindings of it can match (binding.Pushdown).
	NoPushdown bool
}

// The defaults of AbsenceLimits.
const (
	DefaultGrace                 = 30 * time.Second
	DefaultMaxGrace              = time.Hour
	DefaultAbsentReleaseAfter    = 10 * time.Minute
	DefaultMaxAbsentReleaseAfter = 24 * time.Hour
)

// DefaultWorkers is how many workers each handler has when Options say
// nothing.
const DefaultWorkers = 64

// AbsenceLimits are the broker's grace and long-absence settings: defaults,
// and the bounds within which a handler may ask for others in Hello.
type AbsenceLimits struct {
	// Grace is how long a handler may have no instance before it is absent
	// (DefaultGrace); MaxGrace bounds what a handler may ask (DefaultMaxGrace).
	Grace, MaxGrace time.Duration
	// AbsentReleaseAfter: after this long absent, a handler's holds are
	// stripped from every object (DefaultAbsentReleaseAfter; negative means never).
	// MaxAbsentReleaseAfter bounds what a handler may ask (default 24 h);
	// a handler that asks for never gets the bound.
	AbsentReleaseAfter, MaxAbsentReleaseAfter time.Duration
}

func (l AbsenceLimits) withDefaults() AbsenceLimits {
	if l.Grace <= 0 {
		l.Grace = DefaultGrace
	}
	if l.MaxGrace <= 0 {
		l.MaxGrace = DefaultMaxGrace
	}
	if l.AbsentReleaseAfter == 0 {
		l.AbsentReleaseAfter = DefaultAbsentReleaseAfter
	}
	if l.MaxAbsentReleaseAfter <= 0 {
		l.MaxAbsentReleaseAfter = DefaultMaxAbsentReleaseAfter
	}
	return l
}

// For works out the limits that apply to a handler that asked for grace
// and absentAfter in Hello (nil: not asked). An absentAfter of zero means
// never.
func (l AbsenceLimits) For(grace, absentAfter *durationpb.Duration) (time.Duration, time.Duration) {
	g, a := l.Grace, max(l.AbsentReleaseAfter, 0)
	if grace != nil {
		g = min(max(grace.AsDuration(), 0), l.MaxGrace)
	}
	if absentAfter != nil {
		a = absentAfter.AsDuration()
		if a <= 0 || a > l.MaxAbsentReleaseAfter {
			a = l.MaxAbsentReleaseAfter
		}
	}
	if a > 0 && a < g {
		a = g
	}
	return g, a
}

// Manager owns one controller per handler name.
type Manager struct {
	opts Options
	log  hclog.Logger

	mu          sync.Mutex
	ctx         context.Context
	controllers map[string]*controller
	// follower are the handlers known from instances that signed in for
	// reviews only while this replica did not lead (reviewsonly.go).
	follower followerReviews
	// known is what Known returns once Start has returned.
	known []presence.Record
	// restored: the handlers recorded in Leases were brought back.
	restored atomic.Bool
	// accepting is when this broker, restored and synced, could first
	// accept handlers' instances (UnixNano; zero: not yet). Every handler's
	// grace counts from no earlier (contract.Absence).
	accepting atomic.Int64
}

// acceptingSince is when the broker could first accept instances; zero
// while it cannot yet.
func (m *Manager) acceptingSince() time.Time {
	if n := m.accepting.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// New returns a Manager; Start runs it.
func New(opts Options) *Manager {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Recorder == nil {
		opts.Recorder = nopRecorder{}
	}
	if opts.HandlerEvents == nil {
		opts.HandlerEvents = nopHandlerEvents{}
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.StuckAfter <= 0 {
		opts.StuckAfter = contract.DefaultStuckAfter
	}
	if opts.MaxRawEvents <= 0 {
		opts.MaxRawEvents = 256
	}
	opts.Absence = opts.Absence.withDefaults()
	if opts.ReleaseLimiter == nil {
		opts.ReleaseLimiter = NewWriteLimiter(DefaultReleaseQPS, ReleaseBurst(DefaultReleaseQPS))
	}
	if opts.WriteLimiter == nil {
		opts.WriteLimiter = NewWriteLimiter(DefaultWriteQPS, DefaultWriteBurst)
	}
	return &Manager{opts: opts, log: opts.Log, controllers: map[string]*controller{}, follower: followerReviews{}}
}

// Start runs until ctx ends, then stops every handler's workers.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	m.follower.end()
	m.mu.Unlock()
	(&restorer{m}).restore(ctx)
	m.restored.Store(true)
	m.awaitAccepting(ctx)
	<-ctx.Done()
	m.mu.Lock()
	handlers := m.controllers
	m.controllers = map[string]*controller{}
	m.known = m.knownLocked(handlers)
	m.mu.Unlock()
	for _, rt := range handlers {
		rt.stop()
	}
	return nil
}

// Known returns what the Manager knows of each handler's holds: its name
// and the resources where it may hold objects. After Start returned, it is
// what was known when it stopped. An uninstall uses it besides the Leases,
// which may be gone with the broker's namespace.
func (m *Manager) Known() []presence.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.controllers) == 0 {
		return m.known
	}
	return m.knownLocked(m.controllers)
}

func (m *Manager) knownLocked(handlers map[string]*controller) []presence.Record {
	out := make([]presence.Record, 0, len(handlers))
	for name, rt := range handlers {
		out = append(out, presence.Record{Handler: name, Resources: rt.resources(), Sweep: rt.sweeper.remaining()})
	}
	return out
}

// awaitAccepting waits until every handler's informers have handed over
// their initial list, from when a handler coming through the Service (which
// routes to a ready broker only) can be accepted, and then starts the
// handlers' graces.
func (m *Manager) awaitAccepting(ctx context.Context) {
	t := m.opts.Clock.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !m.Synced() {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
	m.accepting.Store(m.opts.Clock.Now().UnixNano())
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rt := range m.controllers {
		rt.presence.poke()
	}
}

// Attach adds an instance to its handler, creating the handler's controller on
// first use. Every instance of a handler must declare the same bindings; a
// handler whose instances are all gone may come back with new ones. On a
// replica that does not lead, only an instance with admission bindings that
// keeps a session to every replica is attached, for reviews only.
func (m *Manager) Attach(_ context.Context, in *session.Instance, hello *tetherv1.Hello, bindings []*binding.Binding) (session.Attachment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil || m.ctx.Err() != nil {
		if everyReplica(in, bindings) {
			return m.follower.attach(in, bindings, func(name string, bs []*binding.Binding, fp string) *reviewsOnly {
				return newReviewsOnly(m, name, bs, fp)
			})
		}
		return session.Attachment{}, session.ErrNotLeading
	}
	grace, absentAfter := m.opts.Absence.For(hello.GetGrace(), hello.GetAbsentReleaseAfter())
	fp := binding.Fingerprint(bindings)
	rt := m.controllers[in.Handler]
	var sweep []presence.Scope
	if rt != nil && rt.fingerprint != fp {
		if n := rt.pool.len(); n > 0 {
			return session.Attachment{}, fmt.Errorf("%w: its bindings differ from those of the %d connected instance(s); "+
				"it is accepted once they have left, as in a rollout to new bindings", session.ErrTryLater, n)
		}
		rt.stop()
		sweep = dropped(rt.bindings, rt.sweeper.remaining(), bindings)
		rt = nil
	}
	if rt == nil {
		rt = newController(m, in.Handler, bindings, fp, sweep)
		rt.presence.declared = hello.GetBindings()
		rt.presence.setLimits(grace, absentAfter) // before its first Lease write
		if err := rt.start(m.ctx); err != nil {
			if errors.Is(err, informer.ErrNotStarted) {
				err = fmt.Errorf("%w: the broker is starting", session.ErrTryLater)
			}
			return session.Attachment{}, fmt.Errorf("starting handler %q: %w", in.Handler, err)
		}
		m.addControllerLocked(in.Handler, rt)
	}
	rt.presence.setLimits(grace, absentAfter)
	rt.addInstance(in)
	return session.Attachment{Detach: func() { rt.removeInstance(in) }, Grace: grace, AbsentReleaseAfter: absentAfter}, nil
}

// transient reports whether err is the API server not answering, rather
// than an answer: a retry may succeed.
func transient(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}
