package dispatch

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/release"
)

// A handler that comes back with narrower bindings (a resource dropped,
// fewer namespaces) no longer watches objects it may still hold there; no
// informer would ever show them to it, so rule 3e could not release them.
// The sweeper sweeps such scopes instead: it lists them, releases the
// handler's holds on the objects its bindings no longer cover (paced by the
// release limiter), and keeps each scope in the handler's Lease until a
// sweep finds none left, so that a restart or `broker release` still finds
// those holds.

// scopeOf is where bindings watch objects, by resource: the namespaces, or
// nil for all of them.
func scopeOf(bs []*binding.Binding) map[schema.GroupVersionResource][]string {
	out := map[schema.GroupVersionResource][]string{}
	for _, k := range informerKeys(bs, false) {
		if k.Namespace == "" {
			out[k.Resource] = nil
			continue
		}
		if nss, ok := out[k.Resource]; !ok || nss != nil {
			out[k.Resource] = append(nss, k.Namespace)
		}
	}
	return out
}

// covers reports whether scope watches namespace ns of gvr.
func covers(scope map[schema.GroupVersionResource][]string, gvr schema.GroupVersionResource, ns string) bool {
	nss, ok := scope[gvr]
	return ok && (nss == nil || slices.Contains(nss, ns))
}

// pushdownScopes are the scopes of the resources whose informers bs filter
// by a label selector (binding.Pushdown). A held object that left the
// selector while no informer watched (the broker down, or the handler's
// bindings narrowed) is never shown to the controller again, so these are
// swept at every start.
func pushdownScopes(bs []*binding.Binding) []presence.Scope {
	var out []presence.Scope
	for gvr, nss := range scopeOf(bs) {
		if !binding.Pushdown(bs, gvr).Empty() {
			out = append(out, presence.Scope{Resource: gvr, Namespaces: nss})
		}
	}
	slices.SortFunc(out, func(a, b presence.Scope) int { return compareGVR(a.Resource, b.Resource) })
	return out
}

// dropped is what of the scopes old and sweep the new bindings no longer
// cover: the scopes to sweep.
func dropped(old []*binding.Binding, sweep []presence.Scope, now []*binding.Binding) []presence.Scope {
	scopes := slices.Clone(sweep)
	for gvr, nss := range scopeOf(old) {
		scopes = append(scopes, presence.Scope{Resource: gvr, Namespaces: nss})
	}
	next := scopeOf(now)
	merged := map[schema.GroupVersionResource][]string{}
	for _, sc := range scopes {
		nss, ok := next[sc.Resource]
		if ok && nss == nil {
			continue // all of it is watched
		}
		var left []string
		if len(sc.Namespaces) > 0 {
			left = slices.DeleteFunc(slices.Clone(sc.Namespaces), func(ns string) bool { return ok && slices.Contains(nss, ns) })
			if len(left) == 0 {
				continue
			}
		}
		prev, seen := merged[sc.Resource]
		switch {
		case !seen:
			merged[sc.Resource] = left
		case prev == nil || left == nil:
			merged[sc.Resource] = nil
		default:
			for _, ns := range left {
				if !slices.Contains(prev, ns) {
					prev = append(prev, ns)
				}
			}
			merged[sc.Resource] = prev
		}
	}
	out := make([]presence.Scope, 0, len(merged))
	for gvr, nss := range merged {
		slices.Sort(nss)
		out = append(out, presence.Scope{Resource: gvr, Namespaces: nss})
	}
	slices.SortFunc(out, func(a, b presence.Scope) int { return compareGVR(a.Resource, b.Resource) })
	return out
}

func compareGVR(a, b schema.GroupVersionResource) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Version, b.Version))
}

// sweepRetry is how soon a sweep that failed (the API server not
// answering) is tried again.
const sweepRetry = 5 * time.Second

// sweeper sweeps the scopes one handler dropped of its holds.
type sweeper struct {
	*handler
	// swept runs when a scope is done, to record what is left.
	swept func()

	mu     sync.Mutex
	scopes []presence.Scope
}

// remaining are the scopes still to be swept.
func (sw *sweeper) remaining() []presence.Scope {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return slices.Clone(sw.scopes)
}

// run sweeps the dropped scopes, one after the other, until none is left or
// ctx ends.
func (sw *sweeper) run(ctx context.Context) {
	for {
		sw.mu.Lock()
		var sc presence.Scope
		left := len(sw.scopes) > 0
		if left {
			sc = sw.scopes[0]
		}
		sw.mu.Unlock()
		if !left {
			return
		}
		n, err := sw.sweepScope(ctx, sc)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			sw.log.Warn("cannot sweep a dropped scope; retrying", "resource", sc.Resource, "namespaces", sc.Namespaces,
				"error", err, "delay", sweepRetry)
			select {
			case <-ctx.Done():
				return
			case <-sw.clock.After(sweepRetry):
			}
			continue
		}
		sw.log.Info("swept a scope of the handler's holds", "resource", sc.Resource, "namespaces", sc.Namespaces, "released", n)
		sw.mu.Lock()
		sw.scopes = sw.scopes[1:]
		sw.mu.Unlock()
		sw.swept()
	}
}

// sweepPage is how many objects one list request of a sweep brings.
const sweepPage = 500

// sweepScope releases the handler's holds in sc on the objects its
// informers do not show (binding.Pushdown: an object outside a resource's
// shared selector matches none of its bindings), and returns how many it
// released. It lists in pages, so that a sweep of many objects holds few at
// once.
func (sw *sweeper) sweepScope(ctx context.Context, sc presence.Scope) (int, error) {
	scope := scopeOf(sw.bindings)
	pushed := labels.Everything()
	if !sw.opts.NoPushdown {
		pushed = binding.Pushdown(sw.bindings, sc.Resource)
	}
	nss := sc.Namespaces
	if len(nss) == 0 {
		nss = []string{metav1.NamespaceAll}
	}
	ri := sw.opts.Client.Resource(sc.Resource)
	released := 0
	for _, ns := range nss {
		for next := ""; ; {
			list, err := ri.Namespace(ns).List(ctx, metav1.ListOptions{Limit: sweepPage, Continue: next})
			if apierrors.IsNotFound(err) {
				break // the resource is gone (a CRD removed), and its objects with it
			}
			if err != nil {
				return released, fmt.Errorf("listing %s in %q: %w", sc.Resource.Resource, ns, err)
			}
			n, err := sw.releaseUncovered(ctx, sc.Resource, list.Items, scope, pushed)
			released += n
			if err != nil {
				return released, err
			}
			if next = list.GetContinue(); next == "" {
				break
			}
		}
	}
	return released, nil
}

// releaseUncovered releases the handler's holds on the objects that its
// informers (scope, and the selector pushed down) do not show.
func (sw *sweeper) releaseUncovered(ctx context.Context, gvr schema.GroupVersionResource, objs []unstructured.Unstructured,
	scope map[schema.GroupVersionResource][]string, pushed labels.Selector) (int, error) {
	ri := sw.opts.Client.Resource(gvr)
	released := 0
	for i := range objs {
		obj := &objs[i]
		if !hold.Has(obj, sw.name) || covers(scope, gvr, obj.GetNamespace()) && pushed.Matches(labels.Set(obj.GetLabels())) {
			continue
		}
		now := sw.clock.Now()
		at := sw.opts.ReleaseLimiter.reserve(now)
		select {
		case <-ctx.Done():
			return released, ctx.Err()
		case <-sw.clock.After(at.Sub(now)):
		}
		if err := release.Remove(ctx, ri, obj, sw.name); err != nil {
			return released, fmt.Errorf("releasing %s %s/%s: %w", gvr.Resource, obj.GetNamespace(), obj.GetName(), err)
		}
		released++
		sw.opts.Metrics.Holds().Released(sw.name, metrics.ReleaseNoLongerMatching)
		sw.opts.Recorder.Event(obj, false, "HoldReleased", fmt.Sprintf(
			"handler %q no longer binds this %s: released (rule 3e)", sw.name, gvr.Resource))
	}
	return released, nil
}
