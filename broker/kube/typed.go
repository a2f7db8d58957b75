package kube

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// object is what the client needs of an object: to be decoded into, and
// its name for an update.
type object interface {
	runtime.Object
	GetName() string
}

// typed is the client of one resource, T its object and L its list: the
// requests client-go's generated clients make. It is not client-go's
// generic client (gentype), which links client-go's fakes and, through
// them, the server-side apply machinery.
type typed[T object, L runtime.Object] struct {
	rc        rest.Interface
	resource  string
	namespace string // empty: cluster-scoped, or all namespaces
	newT      func() T
	newL      func() L
}

func resource[T object, L runtime.Object](rc rest.Interface, name, namespace string, newT func() T, newL func() L) Resource[T, L] {
	return typed[T, L]{rc: rc, resource: name, namespace: namespace, newT: newT, newL: newL}
}

func review[T object](rc rest.Interface, name string, newT func() T) Review[T] {
	return typed[T, runtime.Object]{rc: rc, resource: name, newT: newT}
}

func (c typed[T, L]) request(r *rest.Request) *rest.Request {
	return r.NamespaceIfScoped(c.namespace, c.namespace != "").Resource(c.resource)
}

// timeout is a list's or a watch's own, from its options.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

func (c typed[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := c.newT()
	err := c.request(c.rc.Get()).Name(name).VersionedParams(&opts, ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (c typed[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := c.newL()
	err := c.request(c.rc.Get()).VersionedParams(&opts, ParameterCodec).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (c typed[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.request(c.rc.Get()).VersionedParams(&opts, ParameterCodec).Timeout(timeout(opts)).Watch(ctx)
}

func (c typed[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := c.newT()
	err := c.request(c.rc.Post()).VersionedParams(&opts, ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c typed[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := c.newT()
	err := c.request(c.rc.Put()).Name(obj.GetName()).VersionedParams(&opts, ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c typed[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.request(c.rc.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

func (c typed[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out := c.newT()
	err := c.request(c.rc.Patch(pt)).Name(name).SubResource(subresources...).VersionedParams(&opts, ParameterCodec).Body(data).Do(ctx).Into(out)
	return out, err
}
