package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/test/controlplane"
)

// controller is what a scenario benchmarks.
type controller interface {
	// start makes the controller serve the Widgets of ns and returns once
	// it handles them, with a context that ends (with a cause) if the
	// controller dies.
	start(ctx context.Context, ns string) (context.Context, error)
	// done reports whether the controller has finished creating obj.
	done(obj *unstructured.Unstructured) bool
	// cpu is the CPU time (user and system) each of its processes used so
	// far, in the order of memory's.
	cpu() ([]time.Duration, error)
	// memory is the peak RSS and private memory of each of its processes,
	// the first the controller itself, until the phase that just ended.
	memory() []memPeak
	// profile saves what -profile asks for of the phase that just ended,
	// named by label.
	profile(ctx context.Context, label string) error
	// stop ends the controller; it may be called after a failed start.
	stop()
}

// loadWorkers is how many goroutines create and delete the objects.
const loadWorkers = 16

// loadAndWait sends the creates (or deletes) of Widgets from to to-1 and
// waits until the tracker saw all of the first to handled (or gone). It
// returns the bench client's own writes by verb and when the last object
// was done.
func loadAndWait(ctx context.Context, e *env, tr *tracker, ns string, from, to int, label string, start time.Time, deleting bool) (map[string]float64, time.Time, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var sent atomic.Int64
	loadErr := make(chan error, 1)
	go func() {
		err := sendLoad(ctx, e.load, ns, from, to, deleting, &sent)
		if err != nil {
			cancel(err)
		}
		loadErr <- err
	}()
	last, err := tr.wait(ctx, e, label, to, start, deleting)
	cancel(nil)
	lerr := <-loadErr
	if err != nil { // includes a load error, the cause that ended the wait
		return nil, last, err
	}
	if lerr != nil {
		return nil, last, lerr
	}
	verb := "POST"
	if deleting {
		verb = "DELETE"
	}
	return map[string]float64{verb: float64(sent.Load())}, last, nil
}

func widgetName(i int) string { return fmt.Sprintf("w-%05d", i) }

// sendLoad creates (or deletes) the Widgets w-<from>... up to w-<to-1> from
// loadWorkers goroutines, counting the requests it sent.
func sendLoad(ctx context.Context, dyn dynamic.Interface, ns string, from, to int, deleting bool, sent *atomic.Int64) error {
	ri := dyn.Resource(controlplane.WidgetGVR).Namespace(ns)
	next := make(chan int)
	errs := make(chan error, loadWorkers)
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Go(func() {
			for i := range next {
				sent.Add(1)
				var err error
				if deleting {
					err = ri.Delete(ctx, widgetName(i), metav1.DeleteOptions{})
				} else {
					_, err = ri.Create(ctx, newWidget(ns, widgetName(i), i), metav1.CreateOptions{})
				}
				if err != nil {
					errs <- fmt.Errorf("bench client: %w", err)
					return
				}
			}
		})
	}
	var err error
feed:
	for i := from; i < to; i++ {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		case <-ctx.Done():
			err = context.Cause(ctx)
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

func newWidget(ns, name string, size int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"size": int64(size)},
	}}
}

// probe creates one Widget outside the measured set, waits until c handled
// it, deletes it and waits until it is gone: proof that the controller is
// connected and serving before the clock starts.
func probe(ctx context.Context, e *env, ns string, done func(*unstructured.Unstructured) bool) error {
	ri := e.dyn.Resource(controlplane.WidgetGVR).Namespace(ns)
	if _, err := ri.Create(ctx, newWidget(ns, "probe", 0), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the probe widget: %w", err)
	}
	poll := func(what string, cond func(*unstructured.Unstructured, error) bool) error {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			obj, err := ri.Get(ctx, "probe", metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err
			}
			return cond(obj, err), nil
		})
		if err != nil {
			return fmt.Errorf("waiting for the probe widget to be %s: %w", what, err)
		}
		return nil
	}
	if err := poll("handled", func(o *unstructured.Unstructured, err error) bool { return err == nil && done(o) }); err != nil {
		return err
	}
	if err := ri.Delete(ctx, "probe", metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the probe widget: %w", err)
	}
	return poll("gone", func(_ *unstructured.Unstructured, err error) bool { return apierrors.IsNotFound(err) })
}
