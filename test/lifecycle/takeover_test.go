package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// takeover is one handler whose instances record which of them handled
// what: every create delivery, and where each object's daemon runs.
type takeover struct {
	t    *testing.T
	addr string
	ns   string

	mu       sync.Mutex
	creates  map[string][]string // object -> the instances its creates went to
	running  map[string]string   // object -> the instance running its daemon
	overlaps []string            // daemons seen running on two instances at once
}

// instance runs an instance of the handler with the id; stop ends it.
func (k *takeover) instance(id string, opts ...sdk.Option) (stop func()) {
	h := sdk.New("takeover", append(handlerOpts(k.t), append(opts, sdk.WithInstanceID(id))...)...)
	h.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.creates[ev.Name] = append(k.creates[ev.Name], id)
		return nil
	}, sdk.Namespaces(k.ns))
	h.OnDaemon(widgets, func(ctx context.Context, ev *sdk.Event) error {
		k.mu.Lock()
		if other, ok := k.running[ev.Name]; ok {
			k.overlaps = append(k.overlaps, fmt.Sprintf("%s on %s and %s", ev.Name, other, id))
		}
		k.running[ev.Name] = id
		k.mu.Unlock()
		<-ctx.Done()
		k.mu.Lock()
		delete(k.running, ev.Name)
		k.mu.Unlock()
		return nil
	}, sdk.Namespaces(k.ns))
	return runHandler(k.t, h, k.addr)
}

// create makes the widgets named prefix-0 ... prefix-(n-1) and waits until
// each one's create was handled and its daemon runs; it returns the names.
func (k *takeover) create(cp *controlplane.ControlPlane, prefix string, n int) []string {
	k.t.Helper()
	dyn := cp.Dynamic(k.t)
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		create(k.t, dyn, widgetGVR, widget(k.ns, name, nil))
		names = append(names, name)
	}
	eventually(k.t, fmt.Sprintf("the %s widgets created and their daemons running", prefix), func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, name := range names {
			if len(k.creates[name]) == 0 || k.running[name] == "" {
				return false
			}
		}
		return true
	})
	return names
}

// handledBy checks that every create of the named widgets went to one of
// the instances.
func (k *takeover) handledBy(names []string, instances ...string) {
	k.t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, name := range names {
		for _, id := range k.creates[name] {
			if !slices.Contains(instances, id) {
				k.t.Errorf("the create of %s went to %s, want one of %v", name, id, instances)
			}
		}
	}
}

// daemons returns where each of the named widgets' daemons runs.
func (k *takeover) daemons(names []string) map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]string{}
	for _, name := range names {
		out[name] = k.running[name]
	}
	return out
}

// TestDevInstanceTakesOverAndGivesBack: like kopf run --dev, an instance
// that connects with a higher priority takes every object of its handler
// from the in-cluster instances while it is connected (new objects' creates,
// and the daemons of objects they were running), and when it stops, they
// get everything back: new creates again, and each daemon on the instance
// that ran it before.
func TestDevInstanceTakesOverAndGivesBack(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	k := &takeover{t: t, addr: startBroker(t, cp), ns: cp.Namespace(t), creates: map[string][]string{}, running: map[string]string{}}
	k.instance("cluster-a")
	k.instance("cluster-b")
	const n = 8
	before := k.create(cp, "before", n)
	k.handledBy(before, "cluster-a", "cluster-b")
	placed := k.daemons(before)

	stopDev := k.instance("laptop", sdk.WithPriority(1))
	eventually(t, "every daemon moved to the priority-1 instance", func() bool {
		for _, on := range k.daemons(before) {
			if on != "laptop" {
				return false
			}
		}
		return true
	})
	during := k.create(cp, "during", n)
	k.handledBy(during, "laptop")

	stopDev()
	all := append(slices.Clone(before), during...)
	eventually(t, "every daemon back on a priority-0 instance", func() bool {
		for _, on := range k.daemons(all) {
			if on != "cluster-a" && on != "cluster-b" {
				return false
			}
		}
		return true
	})
	for name, on := range k.daemons(before) {
		if on != placed[name] {
			t.Errorf("the daemon of %s came back on %s, it ran on %s before the takeover", name, on, placed[name])
		}
	}
	after := k.create(cp, "after", n)
	k.handledBy(after, "cluster-a", "cluster-b")

	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.overlaps) > 0 {
		t.Errorf("daemons ran on two instances at once: %v", k.overlaps)
	}
}
