package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/test/controlplane"
)

// clearWidgets deletes the n Widgets of a timer run's namespace once no
// later run uses them, stripping their finalizers first: left held, the
// next count's broker would sweep them (its handler, of the same name, no
// longer binds that namespace) and its releases would be API writes in the
// next measurement window.
func clearWidgets(ctx context.Context, e *env, ns string, n int) error {
	ri := e.load.Resource(controlplane.WidgetGVR).Namespace(ns)
	strip := []byte(`{"metadata":{"finalizers":null}}`)
	start := time.Now()
	next := make(chan int)
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Go(func() {
			for i := range next {
				name := widgetName(i)
				_, err := ri.Patch(ctx, name, types.MergePatchType, strip, metav1.PatchOptions{})
				if err == nil {
					err = ri.Delete(ctx, name, metav1.DeleteOptions{})
				}
				if err != nil && !apierrors.IsNotFound(err) {
					err = fmt.Errorf("clearing %s/%s: %w", ns, name, err)
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for i := range n {
		if failed.Load() != nil || ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	e.progressf("cleared the %d Widgets of %s in %.1fs", n, ns, time.Since(start).Seconds())
	return nil
}
