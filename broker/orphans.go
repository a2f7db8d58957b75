package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/dispatch"
	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/release"
	"github.com/tether-dev/tether/broker/webhook"
)

// orphans is the leader's look at the handlers recorded in the presence
// Leases: every releasePoll for release requests, every RecheckEvery at
// the identities of absent STRICT handlers. It finds the orphans: absent STRICT
// handlers whose identity can no longer sign in (presence.Orphan), whose
// holds and fail-closed webhooks would otherwise stay unnoticed. It marks
// them on their Lease (for `broker status`), posts a HandlerOrphaned Event
// there and sets tether_handler_orphaned. And it acts on the releases
// `broker release --handler` asks of a running broker.
type orphans struct {
	log        hclog.Logger
	namespace  string
	every      time.Duration
	kube       kube.Interface
	dyn        dynamic.Interface // the write client, as for an uninstall
	store      *presence.Store
	dispatcher *dispatch.Manager
	hooks      *webhook.Manager // nil without admission
	recorder   *eventRecorder
	metrics    *metrics.Metrics
}

// releasePoll is how often the leader looks for release requests: `broker
// release --handler` waits for it to take one up.
const releasePoll = 2 * time.Second

// run looks until ctx ends.
func (o *orphans) run(ctx context.Context) {
	t := time.NewTicker(min(o.every, releasePoll))
	defer t.Stop()
	var checked time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		identities := time.Since(checked) >= o.every
		if identities {
			checked = time.Now()
		}
		o.pass(ctx, identities)
	}
}

// pass looks once at every recorded handler: at its release request, and,
// when identities, at whether it is orphaned.
func (o *orphans) pass(ctx context.Context, identities bool) {
	records, err := o.store.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			o.log.Warn("cannot read the presence leases to look for orphaned handlers", "error", err)
		}
		return
	}
	now := time.Now()
	for _, r := range records {
		switch {
		case !r.Marks.Released.IsZero():
		case !r.Marks.ReleaseRequested.IsZero() || !r.Marks.Releasing.IsZero():
			o.release(ctx, r)
		case identities:
			o.mark(ctx, r, now)
		}
	}
}

// mark looks at one handler's identity when presence.NeedsIdentityCheck
// says so, and records the answer where it changed.
func (o *orphans) mark(ctx context.Context, r presence.Record, now time.Time) {
	why := ""
	if presence.NeedsIdentityCheck(r, now) {
		id := o.identity(ctx, r)
		why = presence.Orphan(r, now, id)
		if id == presence.IdentityUnknown {
			why = r.Marks.Orphaned // nothing learned: keep what was known
		}
	}
	o.metrics.Presence().Orphaned(r.Handler, why != "", false)
	if why == r.Marks.Orphaned {
		return
	}
	if err := o.store.MarkOrphaned(ctx, r.Handler, why); err != nil {
		o.log.Warn("cannot mark the handler's lease", "handler", r.Handler, "orphaned", why != "", "error", err)
	}
	if why != "" {
		o.recorder.Event(o.lease(r.Handler), true, "HandlerOrphaned", fmt.Sprintf("handler %q is orphaned: %s", r.Handler, why))
	}
}

// identity asks whether the handler's identity can still sign in: first
// whether its ServiceAccount exists (one read, no review), then whether it
// may still connect as the handler (one SubjectAccessReview).
func (o *orphans) identity(ctx context.Context, r presence.Record) presence.Identity {
	if ns, name, ok := r.User.ServiceAccount(); ok {
		_, err := o.kube.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return presence.IdentityGone
		case err != nil:
			o.log.Warn("cannot read the handler's ServiceAccount", "handler", r.Handler, "error", err)
			return presence.IdentityUnknown
		}
	}
	for _, right := range auth.HelloRights(o.namespace, r.Handler, 0) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: r.User.Name, Groups: r.User.Groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: right.Namespace, Verb: right.Verb, Group: right.Resource.Group,
				Version: right.Resource.Version, Resource: right.Resource.Resource, Name: right.Name,
			},
		}}
		out, err := o.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			o.metrics.SignIn().Reviewed(metrics.AccessError)
			o.log.Warn("cannot review the handler's rights", "handler", r.Handler, "error", err)
			return presence.IdentityUnknown
		}
		if !out.Status.Allowed {
			o.metrics.SignIn().Reviewed(metrics.AccessDenied)
			return presence.IdentityRevoked
		}
		o.metrics.SignIn().Reviewed(metrics.AccessAllowed)
	}
	return presence.IdentityValid
}

// release does what `broker release --handler` asked, as an uninstall does
// for one handler: forget it (nothing adds its holds back), remove its
// webhook configurations, release its holds, then mark its Lease released,
// which `broker release` deletes. What fails is tried again at the next
// pass: the request stays until it is done.
func (o *orphans) release(ctx context.Context, r presence.Record) {
	h := r.Handler
	if err := o.dispatcher.Forget(h); err != nil {
		o.log.Warn("not releasing handler on request", "handler", h, "error", err)
		if errors.Is(err, dispatch.ErrConnected) {
			if err := o.store.RefuseRelease(ctx, h); err != nil {
				o.log.Warn("cannot clear the release request", "handler", h, "error", err)
			}
			o.recorder.Event(o.lease(h), true, "ReleaseRefused",
				fmt.Sprintf("handler %q has instances connected: stop them before `broker release --handler %s`", h, h))
		}
		return
	}
	o.log.Info("releasing handler on request", "handler", h)
	if err := o.store.MarkReleasing(ctx, h, time.Now()); err != nil {
		o.log.Warn("cannot mark the release taken up; releasing all the same", "handler", h, "error", err)
	}
	if o.hooks != nil {
		if err := o.hooks.Remove(ctx, h); err != nil {
			o.log.Error("cannot remove the handler's webhook configurations; trying again", "handler", h, "error", err)
			return
		}
	}
	released, err := release.Run(ctx, release.Options{
		Client: o.dyn, Presence: o.store, Handlers: []string{h}, Known: []presence.Record{r}, Log: o.log.Named("release"),
		Event: func(obj *unstructured.Unstructured, handler string) {
			o.metrics.Holds().Released(handler, metrics.ReleaseRequested)
			o.recorder.Event(obj, false, "HoldReleased",
				fmt.Sprintf("`broker release --handler %s` asked: hold of handler %q released", handler, handler))
		},
	})
	if err != nil {
		o.log.Error("cannot release every hold of the handler; trying again", "handler", h, "released", len(released), "error", err)
		return
	}
	if err := o.store.MarkReleased(ctx, h, time.Now()); err != nil {
		o.log.Error("cannot mark the handler released; trying again", "handler", h, "error", err)
		return
	}
	o.metrics.Presence().Orphaned(h, false, true)
	o.recorder.Event(o.lease(h), false, "HandlerReleased",
		fmt.Sprintf("handler %q released on request: %d hold(s) released, webhook configurations removed", h, len(released)))
}

// lease is the handler's presence Lease, as Events name it.
func (o *orphans) lease(handler string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("coordination.k8s.io/v1")
	u.SetKind("Lease")
	u.SetNamespace(o.namespace)
	u.SetName(presence.LeaseName(handler))
	return u
}

// orphans builds the leader's look at orphaned handlers.
func (p *parts) orphans() *orphans {
	o := &orphans{
		log: p.log.Named("orphans"), namespace: p.opts.Namespace, every: p.opts.RecheckEvery,
		kube: p.kube, dyn: p.writer, store: p.store, dispatcher: p.dispatcher, recorder: p.recorder, metrics: p.metrics,
	}
	if p.adm != nil {
		o.hooks = p.adm.hooks
	}
	return o
}
