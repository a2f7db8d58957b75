package typescript

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var widgetGVR = schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}

func widget(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns},
	}}
}

// writeLoad creates widgets at a steady rate, each create on its own
// goroutine so that one slow review does not slow the rate.
type writeLoad struct {
	stopped chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	ok      int
	failed  []writeFailure
	// begun holds when each write that is done (admitted or failed) began.
	begun []time.Time
}

// writeFailure is a write the API server refused, and when it began.
type writeFailure struct {
	began, ended time.Time
	err          error
}

func (f writeFailure) String() string {
	return fmt.Sprintf("begun %s, failed %s: %v", f.began.Format("15:04:05.000"), f.ended.Format("15:04:05.000"), f.err)
}

func startWriteLoad(dyn dynamic.Interface, ns string, perSecond int) *writeLoad {
	l := &writeLoad{stopped: make(chan struct{})}
	l.wg.Go(func() {
		t := time.NewTicker(time.Second / time.Duration(perSecond))
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.stopped:
				return
			case <-t.C:
			}
			l.wg.Go(func() { l.write(dyn, ns, fmt.Sprintf("load-%05d", i)) })
		}
	})
	return l
}

func (l *writeLoad) write(dyn dynamic.Interface, ns, name string) {
	began := time.Now()
	_, err := dyn.Resource(widgetGVR).Namespace(ns).Create(context.Background(), widget(ns, name), metav1.CreateOptions{})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.begun = append(l.begun, began)
	if err != nil {
		l.failed = append(l.failed, writeFailure{began: began, ended: time.Now(), err: err})
		return
	}
	l.ok++
}

// doneSince counts the writes begun at t or later that are done, admitted
// or failed.
func (l *writeLoad) doneSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, b := range l.begun {
		if !b.Before(t) {
			n++
		}
	}
	return n
}

// stop ends the load, waits for the writes under way, and says how many
// were admitted and why the others failed.
func (l *writeLoad) stop() (ok int, failed []writeFailure) {
	close(l.stopped)
	l.wg.Wait()
	return l.ok, l.failed
}
