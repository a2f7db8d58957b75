package informer

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// walkedStore is a cache whose List says it began and waits for release.
type walkedStore struct {
	cache.Store
	walking, release chan struct{}
}

func (s walkedStore) List() []any {
	close(s.walking)
	<-s.release
	return []any{&Object{}}
}

type storeInformer struct {
	cache.SharedIndexInformer
	store cache.Store
}

func (i storeInformer) GetStore() cache.Store { return i.store }

// TestAScrapeDoesNotHoldTheRegistryWhileWalkingCaches: Cached walks every
// cached object; while it does, handlers must still be able to subscribe
// and unsubscribe, which take the registry's lock.
func TestAScrapeDoesNotHoldTheRegistryWhileWalkingCaches(t *testing.T) {
	store := walkedStore{walking: make(chan struct{}), release: make(chan struct{})}
	r := New(Options{})
	key := Key{Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}}
	r.entries[key] = &entry{informer: storeInformer{store: store}}
	done := make(chan int, 1)
	go func() { done <- r.Cached()[key.Resource].Objects }()
	select {
	case <-store.walking:
	case <-time.After(10 * time.Second):
		t.Fatal("Cached did not walk the cache")
	}
	locked := r.mu.TryLock()
	if locked {
		r.mu.Unlock()
	}
	close(store.release)
	if n := <-done; n != 1 {
		t.Errorf("Cached counted %d objects, want 1", n)
	}
	if !locked {
		t.Error("the registry's lock was held while Cached walked a cache")
	}
}
