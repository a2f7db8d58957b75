package index

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/tools/cache"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Subscriber is what Stream needs of the informer registry.
type Subscriber interface {
	Subscribe(key informer.Key, h cache.ResourceEventHandler) (*informer.Subscription, error)
}

// Streamer streams index bindings from the informers of Informers.
type Streamer struct {
	Informers Subscriber
	Log       hclog.Logger
}

// Stream sends b's view to send until ctx ends or send fails: an ADDED for
// every object that matches, then one message with synced set, then
// MODIFIED, ADDED and DELETED as objects change, enter or leave the view.
// The informers' notifications are queued here, so a slow stream holds up
// no informer.
func (s Streamer) Stream(ctx context.Context, b *binding.Binding, send func(*tetherv1.Indexed) error) error {
	q := &queue{wake: make(chan struct{}, 1)}
	v := &view{b: b, q: q, in: map[string]bool{}, log: s.Log}
	var synced []cache.InformerSynced
	for _, key := range keys(b) {
		sub, err := s.Informers.Subscribe(key, v.handler())
		if err != nil {
			return fmt.Errorf("subscribing index binding %q to %s: %w", b.ID, key, err)
		}
		defer sub.Unsubscribe()
		synced = append(synced, sub.HasSynced)
	}
	go func() {
		// The informers hand each subscription its initial list before it
		// reports synced, so the mark is queued after those objects.
		if cache.WaitForCacheSync(ctx.Done(), synced...) {
			q.push(&tetherv1.Indexed{BindingId: b.ID, Synced: true})
		}
	}()
	for {
		for _, m := range q.take() {
			if err := send(m); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-q.wake:
		}
	}
}

// keys are the informers b's objects come from: the cluster's, or one per
// namespace it names. No label selector is pushed down: an index sees what
// its filters let through, tested here.
func keys(b *binding.Binding) []informer.Key {
	if len(b.Namespaces) == 0 {
		return []informer.Key{{Resource: b.Resource.GroupVersionResource}}
	}
	out := make([]informer.Key, 0, len(b.Namespaces))
	for _, ns := range b.Namespaces {
		out = append(out, informer.Key{Resource: b.Resource.GroupVersionResource, Namespace: ns})
	}
	return out
}

// queue is an unbounded FIFO of messages with a wake-up signal.
type queue struct {
	mu   sync.Mutex
	msgs []*tetherv1.Indexed
	wake chan struct{}
}

func (q *queue) push(m *tetherv1.Indexed) {
	q.mu.Lock()
	q.msgs = append(q.msgs, m)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue) take() []*tetherv1.Indexed {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.msgs
	q.msgs = nil
	return out
}
