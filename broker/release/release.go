package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/jsonpatch"
	"github.com/tether-dev/tether/broker/presence"
)

// Options say what to release. Client and Presence are required.
type Options struct {
	Client   dynamic.Interface
	Presence *presence.Store
	// Handlers to release; empty means every handler with a Lease.
	Handlers []string
	// Known are records of handlers from elsewhere than the Leases (the
	// running broker's memory), merged with them: a Lease deleted with the
	// broker's namespace must not hide a handler's holds.
	Known []presence.Record
	// Out gets one line per released object; nil prints nothing.
	Out io.Writer
	// Event, when set, is told about each release (to post an Event); it
	// is called from several goroutines at once.
	Event func(obj *unstructured.Unstructured, handler string)
	Log   hclog.Logger
	// DryRun lists what would be released without writing.
	DryRun bool
	// Workers is how many holds are released at once (default 16): an
	// uninstall must finish within the Pod's termination grace period, and
	// one patch at a time is bound by the round trip, not by the API server.
	Workers int
}

// Released is one hold taken off one object.
type Released struct {
	Handler   string
	Resource  schema.GroupVersionResource
	Namespace string
	Name      string
}

// Run releases the holds of the chosen handlers from every object of their
// resources, each with a guarded JSON patch that removes only that hold.
func Run(ctx context.Context, opts Options) ([]Released, error) {
	log := opts.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if opts.Workers <= 0 {
		opts.Workers = 16
	}
	records, err := opts.Presence.List(ctx)
	if err != nil && len(opts.Known) == 0 {
		return nil, err
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
		log.Warn("cannot read the presence Leases; releasing what the broker knows", "error", err)
	}
	resources := map[string][]schema.GroupVersionResource{}
	for _, r := range slices.Concat(records, opts.Known) {
		for _, gvr := range r.HeldResources() {
			if !slices.Contains(resources[r.Handler], gvr) {
				resources[r.Handler] = append(resources[r.Handler], gvr)
			}
		}
		if _, ok := resources[r.Handler]; !ok {
			resources[r.Handler] = nil
		}
	}
	handlers := slices.Sorted(maps.Keys(resources))
	var out []Released
	var found []string
	for _, h := range handlers {
		if len(opts.Handlers) > 0 && !slices.Contains(opts.Handlers, h) {
			continue
		}
		found = append(found, h)
		for _, gvr := range resources[h] {
			// One resource that fails (RBAC, a webhook, an API error) must
			// not keep the others' holds: go on, and say so at the end.
			rel, err := releaseResource(ctx, opts, h, gvr)
			out = append(out, rel...)
			if err != nil {
				errs = append(errs, fmt.Errorf("handler %s: %w", h, err))
				log.Error("cannot release every hold of a resource; going on with the others", "handler", h, "resource", gvr, "error", err)
			}
		}
	}
	for _, h := range opts.Handlers {
		if !slices.Contains(found, h) {
			log.Warn("no presence lease for handler; nothing known to release", "handler", h)
		}
	}
	return out, errors.Join(errs...)
}

func releaseResource(ctx context.Context, opts Options, handler string, gvr schema.GroupVersionResource) ([]Released, error) {
	ri := opts.Client.Resource(gvr)
	list, err := ri.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil // the resource is gone (a CRD removed), and its objects with it
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", gvr.Resource, err)
	}
	var (
		mu   sync.Mutex
		out  []Released
		errs []error
		wg   sync.WaitGroup
	)
	slots := make(chan struct{}, max(opts.Workers, 1))
	for i := range list.Items {
		obj := &list.Items[i]
		if !hold.Has(obj, handler) {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if !opts.DryRun {
				if err := Remove(ctx, ri, obj, handler); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s %s/%s: %w", gvr.Resource, obj.GetNamespace(), obj.GetName(), err))
					mu.Unlock()
					return
				}
				if opts.Event != nil {
					opts.Event(obj, handler)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			out = append(out, Released{Handler: handler, Resource: gvr, Namespace: obj.GetNamespace(), Name: obj.GetName()})
			if opts.Out != nil {
				verb := "released"
				if opts.DryRun {
					verb = "would release"
				}
				fmt.Fprintf(opts.Out, "%s %s %s/%s from handler %s\n", verb, gvr.Resource, obj.GetNamespace(), obj.GetName(), handler)
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// Remove takes one handler's hold off obj, re-reading it when the guard
// finds it changed; an object already gone is not an error.
func Remove(ctx context.Context, ri dynamic.NamespaceableResourceInterface, obj *unstructured.Unstructured, handler string) error {
	return retry.OnError(retry.DefaultBackoff, apierrors.IsInvalid, func() error {
		var p jsonpatch.Patch
		p.Test("/metadata/uid", string(obj.GetUID()))
		if !hold.Remove(&p, obj, handler) {
			return nil
		}
		data, err := p.JSON()
		if err != nil {
			return err
		}
		_, err = ri.Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.JSONPatchType, data, metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if apierrors.IsInvalid(err) {
			fresh, gerr := ri.Namespace(obj.GetNamespace()).Get(ctx, obj.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			obj = fresh
		}
		return err
	})
}
