package dispatch

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/binding"
)

// The model test drives the real reconcile pass (the worker's
// processNext, the reconciler, the deliverer, the objectWriter) through
// random histories of a few objects of one handler: users create, change,
// relabel and delete them, another controller adds and removes its own
// finalizer, the informer lags, the handler answers each delivery at
// random (OK, FAIL, RETRY with or without retry_after, no answer in time,
// its instance gone mid-delivery), the instance leaves and comes back,
// the clock runs past the grace and absent_release_after, writes wait for
// their turn, lose races and are refused. Only the handler's instance
// (the deliverer's send) and the API server (model_apiserver_test.go) are
// fakes. Every write that lands is judged against the rules of "The
// contract" in docs/design.md, from what the model knows of the history
// (model_rules_test.go), and after each calm spell the model checks what
// must have happened in time. A failure names its seed; -model.seed=N
// replays it.

var (
	modelSeed  = flag.Uint64("model.seed", 0, "run the dispatch model test with this seed only")
	modelSeeds = flag.Int("model.seeds", 25, "how many seeds the dispatch model test runs")
	modelSteps = flag.Int("model.steps", 2000, "how many steps each seed of the dispatch model test takes")
)

const (
	modelGrace     = 30 * time.Second
	modelAfter     = 10 * time.Minute
	modelNames     = 3
	modelSeenLabel = "h-seen" // the label the handler's patches set
	modelForeign   = "other.io/keep"
)

// model is one history: the handler's controller on fakes, and what the model
// knows.
type model struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	p    *passTest
	rt   *controller
	api  *modelAPIServer
	q    *modelQueue

	bindings  []*binding.Binding
	selective map[string]bool // bindings with the selector app=x
	hasUpdate bool

	connected bool
	leftAt    time.Time
	objs      map[string]*truth // the current object of each name
	byUID     map[types.UID]*truth
	made      int
	// calm: every delivery is answered OK and nothing faults; absentCalm:
	// and the handler stays away.
	calm, absentCalm bool

	log       []string
	violation string
	// seen counts what happened, over every seed: the test checks that
	// each rule's release and each fault did happen.
	seen map[string]int
}

func TestModelOfThePass(t *testing.T) {
	seeds := []uint64{*modelSeed}
	if *modelSeed == 0 {
		seeds = seeds[:0]
		for i := range *modelSeeds {
			seeds = append(seeds, uint64(i+1))
		}
	}
	seen := map[string]int{}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			m := newModel(t, seed)
			m.seen = seen
			m.run(*modelSteps)
		})
	}
	t.Logf("what happened over %d seeds of %d steps: %v", len(seeds), *modelSteps, seen)
	if len(seeds) < 10 || t.Failed() {
		return
	}
	for _, what := range []string{"release 3a", "release 3c", "release 3d", "release 3e", "hold added",
		"lost race", "conflict", "refused", "OK", "FAIL", "RETRY", "no answer in time", "gone", "waited for an instance"} {
		if seen[what] == 0 {
			t.Errorf("no history had %q: the model no longer reaches it", what)
		}
	}
}

func newModel(t *testing.T, seed uint64) *model {
	m := &model{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 34)), selective: map[string]bool{},
		objs: map[string]*truth{}, byUID: map[types.UID]*truth{}, connected: true}
	m.bindings = m.randomBindings()
	m.p = newPassTest(t, m.bindings...)
	h := m.p.h
	m.api = &modelAPIServer{m: m, objs: map[string]*unstructured.Unstructured{}}
	h.opts.Client = m.api.client()
	h.opts.WriteLimiter, h.opts.ReleaseLimiter = NewWriteLimiter(0, 0), NewWriteLimiter(0, 0)
	if m.rng.IntN(2) == 0 {
		// Writes wait for their turn, and the strips of 3d for theirs.
		h.opts.WriteLimiter, h.opts.ReleaseLimiter = NewWriteLimiter(4, 2), NewWriteLimiter(1, 1)
	}
	h.presence.setLimits(modelGrace, modelAfter)
	dl := &deliverer{handler: h, send: m.send}
	md := &modelDelivery{m: m, dl: dl}
	r := &reconciler{handler: h, deliver: md, writer: h.writes, events: &rawEvents{handler: h, deliver: md},
		timers: &timers{handler: h, deliver: dl}, daemons: &daemons{handler: h, deliver: dl}}
	m.q = &modelQueue{clk: m.p.clk, due: map[types.UID]time.Time{}}
	m.rt = &controller{handler: h, queue: m.q, reconciler: r}
	var desc []string
	for _, b := range m.bindings {
		desc = append(desc, fmt.Sprintf("%s %s %s retries %d selective %v", b.ID, b.Kind, b.Policy, b.Retry.Retries, m.selective[b.ID]))
	}
	m.logf("bindings: %s; write limiter %v", strings.Join(desc, "; "), h.opts.WriteLimiter.interval > 0)
	return m
}

// randomBindings: a create, maybe an update, and one or two delete
// bindings of random policies, one maybe with a label selector.
func (m *model) randomBindings() []*binding.Binding {
	policies := []binding.Policy{binding.PolicyHold, binding.PolicyStrict, binding.PolicyNone}
	withRetries := func(b *binding.Binding) *binding.Binding {
		b.Retry.Retries = m.rng.IntN(4)
		return b
	}
	// Compiled bindings of the kinds that never hold have policy NONE.
	bs := []*binding.Binding{withRetries(bind("c", binding.Create, binding.PolicyNone))}
	if m.rng.IntN(2) == 0 {
		bs = append(bs, withRetries(bind("u", binding.Update, binding.PolicyNone)))
		m.hasUpdate = true
	}
	d1 := withRetries(bind("d1", binding.Delete, policies[m.rng.IntN(3)]))
	if m.rng.IntN(2) == 0 {
		d1.Labels = labels.SelectorFromSet(labels.Set{"app": "x"})
		m.selective["d1"] = true
	}
	bs = append(bs, d1)
	if m.rng.IntN(5) < 2 {
		bs = append(bs, withRetries(bind("d2", binding.Delete, policies[m.rng.IntN(3)])))
	}
	return bs
}

func (m *model) binding(id string) *binding.Binding {
	i := slices.IndexFunc(m.bindings, func(b *binding.Binding) bool { return b.ID == id })
	return m.bindings[i]
}

func (m *model) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("%8.3fs ", m.p.clk.Since(passStart).Seconds())+fmt.Sprintf(format, args...))
	if len(m.log) > 80 {
		m.log = m.log[len(m.log)-60:]
	}
}

// violate records the first rule broken; the step ends the history.
func (m *model) violate(rule, format string, args ...any) {
	if m.violation == "" {
		m.violation = "rule " + rule + ": " + fmt.Sprintf(format, args...)
		m.logf("VIOLATION %s", m.violation)
	}
}

func (m *model) stopOnViolation() {
	if m.violation != "" {
		m.t.Fatalf("%s\nthe history's last steps:\n%s\nreplay: go test ./broker/dispatch -run 'TestModelOfThePass/seed=%d$' -model.seed=%d",
			m.violation, strings.Join(m.log, "\n"), m.seed, m.seed)
	}
}

func (m *model) run(steps int) {
	for range steps {
		m.step()
		m.stopOnViolation()
		if m.rng.IntN(150) == 0 {
			m.settle(m.rng.IntN(2) == 0)
		}
	}
	// The end: everything handled; the handler leaves and every object is
	// deleted; it stays away (3c, 3d); it comes back (the STRICT work).
	m.settle(false)
	if m.connected {
		m.leave()
	}
	for i := range modelNames {
		if tr, obj := m.live(fmt.Sprintf("w%d", i)); tr != nil {
			m.delete(tr, obj)
		}
	}
	m.settle(true)
	m.settle(false)
}

// step is one random thing happening.
func (m *model) step() {
	switch n := m.rng.IntN(100); {
	case n < 30:
		m.work()
	case n < 40:
		m.inform(m.anyTruth())
	case n < 50:
		m.userCreates()
	case n < 58:
		m.userChanges()
	case n < 63:
		m.userRelabels()
	case n < 69:
		m.userDeletes()
	case n < 73:
		m.otherController()
	case n < 85:
		m.tick()
	case n < 89:
		m.toggleInstance()
	default:
		m.fault()
	}
}

// work is one pass of the worker over an object that is due.
func (m *model) work() {
	if uid, ok := m.q.pick(m.rng); ok {
		m.logf("pass over %s", m.byUID[uid])
		m.rt.processNext(context.Background())
	}
}

// settle is a calm spell: the informer catches up, every delivery is
// answered OK, nothing faults, and the worker runs until nothing is due,
// the clock moving to what is due next. The handler is there, or, when
// absent, stays away past its grace and then past absent_release_after.
// Then what must have happened by now is checked.
func (m *model) settle(absent bool) {
	m.calm, m.absentCalm, m.api.fault = true, absent, nil
	defer func() { m.calm, m.absentCalm = false, false }()
	m.logf("calm spell, handler absent %v", absent)
	switch {
	case absent && m.connected:
		m.leave()
	case !absent && !m.connected:
		m.join()
	}
	m.drain()
	if absent {
		m.advance(m.leftAt.Add(modelGrace + time.Second).Sub(m.p.clk.Now()))
		m.drain()
		m.checkSettled()
		m.stopOnViolation()
		m.advance(m.leftAt.Add(modelAfter + time.Second).Sub(m.p.clk.Now()))
		m.drain()
	}
	m.checkSettled()
	m.stopOnViolation()
}

// drain runs the worker until the queue is empty.
func (m *model) drain() {
	for range 2000 {
		for _, tr := range m.truths() {
			m.inform(tr)
		}
		if _, ok := m.q.pick(m.rng); ok {
			m.rt.processNext(context.Background())
			m.stopOnViolation()
			continue
		}
		next, ok := m.q.next()
		if !ok {
			return
		}
		m.advance(max(next.Sub(m.p.clk.Now()), modelTick))
	}
	m.violate("6", "the queue never emptied in a calm spell: %v", m.q.due)
	m.stopOnViolation()
}
