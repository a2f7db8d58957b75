package dispatch

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/client-go/tools/cache"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// warmEvery is how often KeepWarm reads the presence Leases again, to
// follow the handlers that come and their binding changes: one list of a
// few Leases; bindings are compiled again only when they changed.
const warmEvery = 5 * time.Second

// KeepWarm keeps subscribed, until ctx ends, the informers that the
// handlers recorded in the presence Leases need: a follower's caches are
// then full when it takes over, and its restore does not list every object
// again. It also makes the follower know the recorded admission bindings
// (knowReviews), so that a review reaching it before the handler's instance
// does waits for one. Start's restore subscribes the same informers, so once it has,
// ending ctx leaves them running. A Lease list that fails keeps what is
// warm; a binding that does not compile warms nothing (the restore decides
// what it means).
func (m *Manager) KeepWarm(ctx context.Context) error {
	if m.opts.Presence == nil || m.opts.Compile == nil {
		return nil
	}
	select {
	case <-m.opts.Informers.Started():
	case <-ctx.Done():
		return nil
	}
	subs := map[informer.Key]*informer.Subscription{}
	compiled := map[string]warmed{}
	defer func() {
		for _, s := range subs {
			s.Unsubscribe()
		}
	}()
	t := m.opts.Clock.NewTicker(warmEvery)
	defer t.Stop()
	for {
		if want, ok := m.warmKeys(ctx, compiled); ok {
			for k, s := range subs {
				if !want[k] {
					s.Unsubscribe()
					delete(subs, k)
				}
			}
			var added []cache.InformerSynced
			for k := range want {
				if subs[k] != nil {
					continue
				}
				s, err := m.opts.Informers.Subscribe(k, cache.ResourceEventHandlerFuncs{})
				if err != nil {
					m.log.Warn("cannot keep an informer warm for a takeover", "informer", k.String(), "error", err)
					continue
				}
				subs[k] = s
				added = append(added, s.HasSynced)
			}
			if len(added) > 0 && cache.WaitForCacheSync(ctx.Done(), added...) {
				m.log.Info("caches warm for a takeover", "informers", len(subs), "added", len(added))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// warmed is what one handler's recorded bindings need warm, and the
// bindings it was compiled from.
type warmed struct {
	declared []*tetherv1.Binding
	keys     []informer.Key
}

// warmKeys are the informers the recorded handlers' bindings need; false
// when the Leases cannot be read. compiled keeps, by handler, what was
// compiled before, so that only changed bindings are compiled again.
func (m *Manager) warmKeys(ctx context.Context, compiled map[string]warmed) (map[informer.Key]bool, bool) {
	records, err := m.opts.Presence.List(ctx)
	if err != nil {
		m.log.Debug("cannot read handler presence to warm the caches; retrying", "error", err, "delay", warmEvery)
		return nil, false
	}
	want := map[informer.Key]bool{}
	seen := map[string]bool{}
	for _, r := range records {
		seen[r.Handler] = true
		c, ok := compiled[r.Handler]
		if !ok || !slices.EqualFunc(c.declared, r.Bindings, func(a, b *tetherv1.Binding) bool { return proto.Equal(a, b) }) {
			// One by one, as the restore compiles them: one that does not
			// compile leaves the others warm.
			var bs []*binding.Binding
			again := false // the API server did not answer: compile again next time
			for _, pb := range r.Bindings {
				b, err := m.opts.Compile(ctx, []*tetherv1.Binding{pb})
				again = again || (err != nil && transient(err))
				bs = append(bs, b...)
			}
			c = warmed{declared: r.Bindings, keys: informerKeys(bs, !m.opts.NoPushdown)}
			if !again {
				compiled[r.Handler] = c
				m.knowReviews(r.Handler, bs)
			}
		}
		for _, k := range c.keys {
			want[k] = true
		}
	}
	for h := range compiled {
		if !seen[h] {
			delete(compiled, h)
		}
	}
	return want, true
}
