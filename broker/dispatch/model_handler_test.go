package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// The model test's handler instance and queue.

// modelDelivery is the real deliverer, but before it would wait for an
// instance, what ends the wait in the cluster happens: the instance comes
// back, the grace runs out, or the user changes the object.
type modelDelivery struct {
	m  *model
	dl *deliverer
}

func (md *modelDelivery) call(ctx context.Context, o *object, b *binding.Binding, d *tetherv1.Delivery) reply {
	md.m.endWait(o.uid)
	return md.dl.call(ctx, o, b, d)
}

// endWait makes what would end a wait for an instance happen, when the
// handler has none and is in its grace.
func (m *model) endWait(uid types.UID) {
	if in, _ := m.p.h.pool.owner(uid); in != nil || m.presence() >= contract.Absent {
		return
	}
	m.seen["waited for an instance"]++
	switch n := m.rng.IntN(3); {
	case m.absentCalm || n == 0:
		m.logf("waiting for an instance: the grace runs out")
		m.advance(m.leftAt.Add(modelGrace).Sub(m.p.clk.Now()))
	case n == 1 || m.calm:
		m.join()
	default:
		tr := m.byUID[uid]
		if obj := m.api.objs[tr.name]; obj != nil && obj.GetUID() == uid {
			obj = obj.DeepCopy()
			obj.SetAnnotations(map[string]string{"touched": m.p.clk.Now().String()})
			m.api.put(tr, obj)
			m.logf("waiting for an instance: the user touches %s", tr)
			m.inform(tr)
			return
		}
		m.join()
	}
}

// send is the handler's instance answering one delivery at random.
func (m *model) send(_ *session.Instance, _ context.Context, d *tetherv1.Delivery, _ <-chan struct{}, _ <-chan time.Time) (*tetherv1.Ack, error) {
	outcome, ack, err := m.answer(d)
	m.seen[outcome]++
	m.logf("  delivered %s %s of %s (size %d): %s", kindLabel(d.GetKind()), d.GetBindingId(), d.GetRef().GetUid(), specSize(d.GetObject()), outcome)
	switch outcome {
	case "gone":
		m.leave()
		m.endWait(types.UID(d.GetRef().GetUid()))
	default:
		m.heard(d, outcome)
	}
	return ack, err
}

func (m *model) answer(d *tetherv1.Delivery) (string, *tetherv1.Ack, error) {
	n := m.rng.IntN(100)
	if m.calm {
		n = 0
	}
	switch {
	case n < 45:
		ack := &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_OK}
		if d.GetKind() != tetherv1.DeliveryKind_DELIVERY_KIND_DELETE && m.rng.IntN(4) == 0 {
			ack.Patch = fmt.Appendf(nil, `{"metadata":{"labels":{%q:"%d"}}}`, modelSeenLabel, specSize(d.GetObject()))
		}
		return "OK", ack, nil
	case n < 55:
		return "FAIL", &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: "no"}, nil
	case n < 70:
		after := durationpb.New(time.Duration(1+m.rng.IntN(5)) * time.Second)
		return "RETRY", &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_RETRY, RetryAfter: after}, nil
	case n < 78:
		return "RETRY", &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_RETRY}, nil
	case n < 90:
		return "no answer in time", nil, context.DeadlineExceeded
	}
	return "gone", nil, session.ErrGone
}

// specSize is spec.size of an object's JSON.
func specSize(raw []byte) int64 {
	var obj struct {
		Spec struct {
			Size int64 `json:"size"`
		} `json:"spec"`
	}
	_ = json.Unmarshal(raw, &obj)
	return obj.Spec.Size
}

// modelQueue is the controller's queue as the model keeps it: when each UID
// is due. Get hands out the one pick chose.
type modelQueue struct {
	workqueue.TypedRateLimitingInterface[types.UID]
	clk interface{ Now() time.Time }
	due map[types.UID]time.Time
	got types.UID
}

// pick chooses one of the UIDs due now for the next Get.
func (q *modelQueue) pick(rng *rand.Rand) (types.UID, bool) {
	var due []types.UID
	for uid, at := range q.due {
		if !at.After(q.clk.Now()) {
			due = append(due, uid)
		}
	}
	if len(due) == 0 {
		return "", false
	}
	slices.Sort(due)
	q.got = due[rng.IntN(len(due))]
	delete(q.due, q.got)
	return q.got, true
}

// next is when the next UID is due.
func (q *modelQueue) next() (time.Time, bool) {
	var first time.Time
	for _, at := range q.due {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}

func (q *modelQueue) Get() (types.UID, bool) { return q.got, false }
func (q *modelQueue) Done(types.UID)         {}
func (q *modelQueue) Forget(types.UID)       {}
func (q *modelQueue) Len() int               { return len(q.due) }
func (q *modelQueue) Add(uid types.UID)      { q.AddAfter(uid, 0) }

func (q *modelQueue) AddRateLimited(uid types.UID) { q.AddAfter(uid, 10*time.Millisecond) }

func (q *modelQueue) AddAfter(uid types.UID, d time.Duration) {
	at := q.clk.Now().Add(d)
	if cur, ok := q.due[uid]; !ok || at.Before(cur) {
		q.due[uid] = at
	}
}
