package dispatch

import (
	"context"
	"slices"
	"testing"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/util/workqueue"

	"github.com/tether-dev/tether/broker/binding"
)

// recordingQueue is the controller's queue, recording what a worker asks of
// it after a pass.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[types.UID]
	asked []string
}

func (q *recordingQueue) Forget(types.UID) { q.asked = append(q.asked, "forget") }

func (q *recordingQueue) AddRateLimited(types.UID) { q.asked = append(q.asked, "rate limited") }

func (q *recordingQueue) AddAfter(_ types.UID, d time.Duration) {
	q.asked = append(q.asked, "after "+d.String())
}

// TestWorkerActsOnThePassResult: what the queue is asked after a pass,
// and whether the object is let go of, follow from the pass's result.
func TestWorkerActsOnThePassResult(t *testing.T) {
	create := bind("c", binding.Create, binding.PolicyHold)
	for _, tc := range []struct {
		name    string
		setup   func(p *passTest, o *object, cancel context.CancelFunc)
		replies []reply
		answers []writeAnswer
		asked   []string
		kept    bool // the object is still known after the pass
	}{
		{name: "a pass that leaves nothing to do forgets the object", asked: []string{"forget"}},
		{name: "a pass that waits looks again when the wait is over", replies: []reply{{result: lookAgainIn(3 * time.Second)}},
			asked: []string{"forget", "after 3s"}, kept: true},
		{name: "a failed pass is retried with the rate limit", answers: []writeAnswer{{err: errWrite}},
			asked: []string{"rate limited"}, kept: true},
		{name: "a pass cut short is forgotten until what cut it queues it again", replies: []reply{{result: result{cut: cutAbsent}}},
			asked: []string{"forget"}, kept: true},
		{name: "a pass the broker's stop ended asks nothing", replies: []reply{{result: failedWith(context.Canceled)}},
			setup: func(_ *passTest, _ *object, cancel context.CancelFunc) { cancel() }, kept: true},
		{name: "an object outside the informers' selector that is not at rest is looked at again", asked: []string{"forget", "after 5s"}, kept: true,
			setup: func(p *passTest, o *object, _ context.CancelFunc) {
				p.h.opts.Client = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(),
					map[schema.GroupVersionResource]string{passResource.GroupVersionResource: "WidgetList"}, sized("1", 1, "red"))
				p.h.mu.Lock()
				o.outside = true
				o.daemons = map[string]*daemon{"gone": {}} // a record the pass does not clear
				p.h.mu.Unlock()
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPassTest(t, create)
			q := &recordingQueue{TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(
				workqueue.DefaultTypedControllerRateLimiter[types.UID](),
				workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "test", Clock: p.clk})}
			defer q.ShutDown()
			rt := &controller{handler: p.h, queue: q, reconciler: p.r}
			o := p.see(sized("1", 1, "red"), watchAdded, false)
			p.dl.replies["c"] = tc.replies
			p.w.answers = tc.answers
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.setup != nil {
				tc.setup(p, o, cancel)
			}
			q.Add(o.uid)
			if !rt.processNext(ctx) {
				t.Fatal("the worker stopped")
			}
			if !slices.Equal(q.asked, tc.asked) {
				t.Errorf("asked the queue %q, want %q", q.asked, tc.asked)
			}
			p.h.mu.Lock()
			_, kept := p.h.objects[o.uid]
			p.h.mu.Unlock()
			if kept != tc.kept {
				t.Errorf("object kept %v, want %v", kept, tc.kept)
			}
		})
	}
}

// TestWorkerStopsWhenTheQueueShutsDown: a worker returns false once the
// queue is shut down, and makes no pass.
func TestWorkerStopsWhenTheQueueShutsDown(t *testing.T) {
	p := newPassTest(t)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.UID]())
	q.ShutDown()
	rt := &controller{handler: p.h, queue: q, reconciler: p.r}
	if rt.processNext(context.Background()) {
		t.Error("the worker went on after the queue shut down")
	}
}
