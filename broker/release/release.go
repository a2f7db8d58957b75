package release

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"

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
	// Out gets one line per released object; nil prints nothing.
	Out io.Writer
	// Event, when set, is told about each release (to post an Event).
	Event func(obj *unstructured.Unstructured, handler string)
	Log   hclog.Logger
	// DryRun lists what would be released without writing.
	DryRun bool
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
	records, err := opts.Presence.List(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(records, func(i, j int) bool { return records[i].Handler < records[j].Handler })
	var out []Released
	var found []string
	for _, r := range records {
		if len(opts.Handlers) > 0 && !slices.Contains(opts.Handlers, r.Handler) {
			continue
		}
		found = append(found, r.Handler)
		for _, gvr := range r.HeldResources() {
			rel, err := releaseResource(ctx, opts, r.Handler, gvr)
			out = append(out, rel...)
			if err != nil {
				return out, err
			}
		}
	}
	for _, h := range opts.Handlers {
		if !slices.Contains(found, h) {
			log.Warn("no presence lease for handler; nothing known to release", "handler", h)
		}
	}
	return out, nil
}

func releaseResource(ctx context.Context, opts Options, handler string, gvr schema.GroupVersionResource) ([]Released, error) {
	ri := opts.Client.Resource(gvr)
	var out []Released
	list, err := ri.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil // the resource is gone (a CRD removed), and its objects with it
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", gvr.Resource, err)
	}
	for i := range list.Items {
		obj := &list.Items[i]
		if !hold.Has(obj, handler) {
			continue
		}
		if !opts.DryRun {
			if err := Remove(ctx, ri, obj, handler); err != nil {
				return out, err
			}
			if opts.Event != nil {
				opts.Event(obj, handler)
			}
		}
		rel := Released{Handler: handler, Resource: gvr, Namespace: obj.GetNamespace(), Name: obj.GetName()}
		out = append(out, rel)
		if opts.Out != nil {
			verb := "released"
			if opts.DryRun {
				verb = "would release"
			}
			fmt.Fprintf(opts.Out, "%s %s %s/%s from handler %s\n", verb, gvr.Resource, obj.GetNamespace(), obj.GetName(), handler)
		}
	}
	return out, nil
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
