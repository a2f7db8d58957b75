package informer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/tether-dev/tether/broker/kube"
)

// NewClient makes the REST client a Registry lists and watches with, and
// Patch writes with, speaking JSON: the cached form is the object's JSON.
func NewClient(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.ContentType, c.AcceptContentTypes = "application/json", "application/json"
	c.GroupVersion = nil
	// Used only to decode errors (Status); objects are read by scan.go.
	c.NegotiatedSerializer = kube.Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("creating a JSON client: %w", err)
	}
	return rc, nil
}

// listWatch lists and watches the objects of key with c, reading each
// object straight into its cached form: the maps an unstructured object is
// made of are never built. listed is called as each list of every object
// begins: a list's first page, or a watch that sends the initial objects
// (the reflector's watch list).
func listWatch(c rest.Interface, key Key, listed func()) *cache.ListWatch {
	path := Path(key)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = key.Labels
			if o.Continue == "" {
				listed()
			}
			return readList(c.Get().AbsPath(path...).VersionedParams(&o, metav1.ParameterCodec).Do(ctx))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				listed()
			}
			o.Watch = true
			o.LabelSelector = key.Labels
			body, err := c.Get().AbsPath(path...).VersionedParams(&o, metav1.ParameterCodec).Stream(ctx)
			if err != nil {
				return nil, err
			}
			return newObjectWatch(body), nil
		},
	}
}

// Path is the URL path of key's collection, as lists, watches and the
// broker's writes address it.
func Path(key Key) []string {
	gvr := key.Resource
	p := []string{"/apis", gvr.Group, gvr.Version}
	if gvr.Group == "" {
		p = []string{"/api", gvr.Version}
	}
	if key.Namespace != "" {
		p = append(p, "namespaces", key.Namespace)
	}
	return append(p, gvr.Resource)
}

// readList reads the answer to a list. Its error is Error's, the API
// server's Status (a "too large resource version" is told by its causes),
// not Raw's, which keeps only the HTTP code.
func readList(result rest.Result) (*metav1.List, error) {
	if err := result.Error(); err != nil {
		return nil, err
	}
	raw, _ := result.Raw()
	return listFromJSON(raw)
}

// listFromJSON reads a list response: its resourceVersion and continue
// token, and each item in its cached form.
func listFromJSON(data []byte) (*metav1.List, error) {
	var l struct {
		Metadata metav1.ListMeta   `json:"metadata"`
		Items    []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("reading a list: %w", err)
	}
	out := &metav1.List{ListMeta: l.Metadata, Items: make([]runtime.RawExtension, len(l.Items))}
	for i, item := range l.Items {
		o, err := fromValidJSON(item)
		if err != nil {
			return nil, fmt.Errorf("reading item %d of a list: %w", i, err)
		}
		out.Items[i].Object = o
	}
	return out, nil
}

// objectWatch is a watch whose objects are in their cached form; errors
// come as *metav1.Status, as from client-go's own watches.
type objectWatch struct {
	body     io.ReadCloser
	result   chan watch.Event
	done     chan struct{}
	stopOnce sync.Once
}

func newObjectWatch(body io.ReadCloser) *objectWatch {
	w := &objectWatch{body: body, result: make(chan watch.Event), done: make(chan struct{})}
	go w.receive()
	return w
}

func (w *objectWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *objectWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.done)
		w.body.Close()
	})
}

// watchFrame is one event of a watch's JSON stream, its object as it came:
// encoding/json has checked that it is valid JSON.
type watchFrame struct {
	Type   watch.EventType `json:"type"`
	Object json.RawMessage `json:"object"`
}

func (w *objectWatch) receive() {
	defer close(w.result)
	defer w.Stop()
	dec := json.NewDecoder(w.body)
	for {
		var frame watchFrame
		err := dec.Decode(&frame)
		if errors.Is(err, io.EOF) {
			return
		}
		var ev watch.Event
		if err == nil {
			ev, err = eventFromJSON(frame.Type, frame.Object)
		}
		if err != nil {
			select {
			case <-w.done: // stopped: the read failed because the body closed
				return
			default:
			}
			ev = watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(
				fmt.Errorf("unable to decode an event from the watch stream: %w", err)).ErrStatus}
		}
		select {
		case w.result <- ev:
		case <-w.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// initialEventsEnd is the annotation of the bookmark that ends a watch
// list's initial events.
const initialEventsEnd = metav1.InitialEventsAnnotationKey

func eventFromJSON(typ watch.EventType, raw json.RawMessage) (watch.Event, error) {
	switch typ {
	case watch.Error:
		var st metav1.Status
		if err := json.Unmarshal(raw, &st); err != nil {
			return watch.Event{}, fmt.Errorf("reading a watch error: %w", err)
		}
		return watch.Event{Type: typ, Object: &st}, nil
	case watch.Bookmark:
		var b struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &b); err != nil {
			return watch.Event{}, fmt.Errorf("reading a bookmark: %w", err)
		}
		o := &Object{ResourceVersion: b.Metadata.ResourceVersion, initialEventsEnd: b.Metadata.Annotations[initialEventsEnd] == "true"}
		return watch.Event{Type: typ, Object: o}, nil
	case watch.Added, watch.Modified, watch.Deleted:
		o, err := fromValidJSON(raw)
		if err != nil {
			return watch.Event{}, err
		}
		return watch.Event{Type: typ, Object: o}, nil
	default:
		return watch.Event{}, fmt.Errorf("a watch event of type %q", typ)
	}
}
