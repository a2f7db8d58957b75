package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"

	"github.com/tether-dev/tether/broker/kube"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// The Lease's label and annotations.
const (
	LabelHandler          = "tether.dev/handler"
	annInstances          = "tether.dev/instances"
	annAbsentSince        = "tether.dev/absent-since"
	annGrace              = "tether.dev/grace"
	annAbsentReleaseAfter = "tether.dev/absent-release-after"
	annBindings           = "tether.dev/bindings"
	annResources          = "tether.dev/resources"
	annSweep              = "tether.dev/sweep"
	annUser               = "tether.dev/user"
)

// LeaseName is the Lease of a handler.
func LeaseName(handler string) string { return "tether-handler-" + handler }

// Record is what the broker remembers about a handler.
type Record struct {
	Handler string
	// Instances connected when the record was written.
	Instances int
	// LastSeen is the last time an instance was known to be connected.
	LastSeen time.Time
	// AbsentSince is when the last instance left; zero while present.
	AbsentSince time.Time
	// Grace and AbsentReleaseAfter are the limits that apply to the handler.
	Grace, AbsentReleaseAfter time.Duration
	// Bindings are the handler's bindings as declared in Hello.
	Bindings []*tetherv1.Binding
	// Resources are the resources the bindings resolved to.
	Resources []schema.GroupVersionResource
	// Sweep are the scopes the handler's bindings no longer cover but where
	// it may still hold objects (it dropped a resource or namespaces): they
	// are swept of its holds, and kept here until a sweep finds none left,
	// so that neither a broker restart nor `broker release` loses them.
	Sweep []Scope
	// Holder is the broker that wrote the record.
	Holder string
	// User is who the handler's instances signed in as (empty in
	// insecure mode): the identity whose loss makes the handler an
	// orphan (Orphan).
	User User
	// Stuck are the handler's holds on objects being deleted that stayed
	// past --stuck-after, as the leader last saw them.
	Stuck Stuck
	// Marks are what the leader and `broker release` write on the Lease
	// beside the record; Put leaves them as they are.
	Marks Marks
	// Signature is what the Store's key says of the record (sign.go).
	Signature Signature
	// Unreadable says what of the Lease could not be decoded; the fields
	// that could are still set (Handler always, Resources when they
	// decoded), so that its holds can still be found and released.
	Unreadable error
}

// Scope is a resource in some namespaces (none: all of them).
type Scope struct {
	Resource   schema.GroupVersionResource
	Namespaces []string
}

type scopeJSON struct {
	Resource   string   `json:"resource"`
	Namespaces []string `json:"namespaces,omitempty"`
}

// HeldResources are the resources where the handler may hold objects: its
// bindings' and those of its sweep.
func (r Record) HeldResources() []schema.GroupVersionResource {
	out := slices.Clone(r.Resources)
	for _, sc := range r.Sweep {
		if !slices.Contains(out, sc.Resource) {
			out = append(out, sc.Resource)
		}
	}
	return out
}

// AbsentSinceOrLastSeen is when the handler left: AbsentSince, or, when the
// broker that recorded it stopped while the handler was connected, the last
// renewal (the handler's stream ended with that broker).
func (r Record) AbsentSinceOrLastSeen() time.Time {
	if !r.AbsentSince.IsZero() {
		return r.AbsentSince
	}
	return r.LastSeen
}

// Store reads and writes Records.
type Store struct {
	Client    kube.Interface
	Namespace string
	// Key, when set, signs what Put writes and checks what List reads
	// (sign.go); nil neither signs nor checks.
	Key *Key
}

// List returns every handler's record.
func (s *Store) List(ctx context.Context) ([]Record, error) {
	list, err := s.Client.CoordinationV1().Leases(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelHandler})
	if err != nil {
		return nil, fmt.Errorf("listing handler leases in %s: %w", s.Namespace, err)
	}
	out := make([]Record, 0, len(list.Items))
	for i := range list.Items {
		r := decode(&list.Items[i])
		r.Signature = verify(s.secret(), &list.Items[i])
		out = append(out, r)
	}
	return out, nil
}

// Put writes r, creating the Lease if needed.
func (s *Store) Put(ctx context.Context, r Record) error {
	leases := s.Client.CoordinationV1().Leases(s.Namespace)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := leases.Get(ctx, LeaseName(r.Handler), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(r.Handler), Namespace: s.Namespace}}
			if err := s.encode(l, r); err != nil {
				return err
			}
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		l := cur.DeepCopy()
		if err := s.encode(l, r); err != nil {
			return err
		}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
}

// encode writes r on l, and signs it with the Key.
func (s *Store) encode(l *coordinationv1.Lease, r Record) error {
	if err := encode(l, r); err != nil {
		return err
	}
	if k := s.secret(); k != nil {
		sign(k, l)
	}
	return nil
}

func (s *Store) secret() []byte {
	if s.Key == nil {
		return nil
	}
	return s.Key.Secret
}

func encode(l *coordinationv1.Lease, r Record) error {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[LabelHandler] = r.Handler
	holder := r.Holder
	// The API server refuses a duration under one second; the grace
	// itself is kept exactly in an annotation.
	secs := int32(max((r.Grace+time.Second-1)/time.Second, 1))
	renew := metav1.NewMicroTime(r.LastSeen)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &secs, &renew
	l.Annotations[annInstances] = strconv.Itoa(r.Instances)
	if r.User.Name != "" {
		l.Annotations[annUser] = r.User.encode()
	}
	if r.Instances > 0 {
		// The handler is back: a release of its past is over, and it
		// signed in, rights checked, as the broker restoring it would not.
		delete(l.Annotations, annReleased)
		delete(l.Annotations, annNotRestored)
	}
	l.Annotations[annGrace] = r.Grace.String()
	l.Annotations[annAbsentReleaseAfter] = r.AbsentReleaseAfter.String()
	if r.AbsentSince.IsZero() {
		delete(l.Annotations, annAbsentSince)
	} else {
		l.Annotations[annAbsentSince] = r.AbsentSince.UTC().Format(time.RFC3339Nano)
	}
	raw := make([]json.RawMessage, 0, len(r.Bindings))
	for _, b := range r.Bindings {
		j, err := protojson.Marshal(b)
		if err != nil {
			return fmt.Errorf("encoding bindings of %s: %w", r.Handler, err)
		}
		raw = append(raw, j)
	}
	bs, err := json.Marshal(raw)
	if err != nil {
		return fmt.Errorf("encoding bindings of %s: %w", r.Handler, err)
	}
	l.Annotations[annBindings] = string(bs)
	res := make([]string, 0, len(r.Resources))
	for _, gvr := range r.Resources {
		res = append(res, encodeResource(gvr))
	}
	l.Annotations[annResources] = strings.Join(res, ",")
	encodeStuck(l.Annotations, r.Stuck)
	if len(r.Sweep) == 0 {
		delete(l.Annotations, annSweep)
		return nil
	}
	sw := make([]scopeJSON, 0, len(r.Sweep))
	for _, sc := range r.Sweep {
		sw = append(sw, scopeJSON{Resource: encodeResource(sc.Resource), Namespaces: sc.Namespaces})
	}
	js, err := json.Marshal(sw)
	if err != nil {
		return fmt.Errorf("encoding the sweep of %s: %w", r.Handler, err)
	}
	l.Annotations[annSweep] = string(js)
	return nil
}

func encodeResource(gvr schema.GroupVersionResource) string {
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}

// decode reads a Lease into a Record. A field that does not decode is
// left out and named in Record.Unreadable; the others are kept.
func decode(l *coordinationv1.Lease) Record {
	r := Record{Handler: l.Labels[LabelHandler]}
	var errs []error
	bad := func(what string, err error) {
		errs = append(errs, fmt.Errorf("%s: %w", what, err))
	}
	if l.Spec.HolderIdentity != nil {
		r.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		r.LastSeen = l.Spec.RenewTime.Time
	}
	var err error
	a := l.Annotations
	if v := a[annInstances]; v != "" {
		if r.Instances, err = strconv.Atoi(v); err != nil {
			bad(annInstances, err)
		}
	}
	if v := a[annAbsentSince]; v != "" {
		if r.AbsentSince, err = time.Parse(time.RFC3339Nano, v); err != nil {
			bad(annAbsentSince, err)
		}
	}
	if r.Grace, err = time.ParseDuration(a[annGrace]); err != nil {
		bad(annGrace, err)
	}
	if r.AbsentReleaseAfter, err = time.ParseDuration(a[annAbsentReleaseAfter]); err != nil {
		bad(annAbsentReleaseAfter, err)
	}
	if r.Bindings, err = decodeBindings(a[annBindings]); err != nil {
		bad(annBindings, err)
	}
	if r.Resources, err = decodeResources(a[annResources]); err != nil {
		bad(annResources, err)
	}
	if r.Sweep, err = decodeSweep(a[annSweep]); err != nil {
		bad(annSweep, err)
	}
	if r.User, err = decodeUser(a[annUser]); err != nil {
		bad(annUser, err)
	}
	if r.Stuck, err = decodeStuck(a[annStuck]); err != nil {
		bad(annStuck, err)
	}
	r.Marks = decodeMarks(a)
	if len(errs) > 0 {
		r.Unreadable = fmt.Errorf("reading lease %s/%s: %w", l.Namespace, l.Name, errors.Join(errs...))
	}
	return r
}

func decodeBindings(v string) ([]*tetherv1.Binding, error) {
	if v == "" {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, err
	}
	out := make([]*tetherv1.Binding, 0, len(raw))
	for _, j := range raw {
		b := &tetherv1.Binding{}
		if err := protojson.Unmarshal(j, b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func decodeResources(v string) ([]schema.GroupVersionResource, error) {
	var out []schema.GroupVersionResource
	for _, s := range strings.Split(v, ",") {
		if s == "" {
			continue
		}
		gvr, err := decodeResource(s)
		if err != nil {
			return out, err
		}
		out = append(out, gvr)
	}
	return out, nil
}

func decodeResource(s string) (schema.GroupVersionResource, error) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return schema.GroupVersionResource{}, fmt.Errorf("%q is not resource.version.group", s)
	}
	gvr := schema.GroupVersionResource{Resource: parts[0], Version: parts[1]}
	if len(parts) == 3 {
		gvr.Group = parts[2]
	}
	return gvr, nil
}

func decodeSweep(v string) ([]Scope, error) {
	if v == "" {
		return nil, nil
	}
	var sw []scopeJSON
	if err := json.Unmarshal([]byte(v), &sw); err != nil {
		return nil, err
	}
	out := make([]Scope, 0, len(sw))
	for _, sc := range sw {
		gvr, err := decodeResource(sc.Resource)
		if err != nil {
			return out, err
		}
		out = append(out, Scope{Resource: gvr, Namespaces: sc.Namespaces})
	}
	return out, nil
}
