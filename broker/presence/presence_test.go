package presence

import (
	"context"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tether-dev/tether/broker/kube/kubetest"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func TestRecordRoundTripsThroughItsLease(t *testing.T) {
	ctx := context.Background()
	s := &Store{Client: kubetest.Wrap(fake.NewClientset()), Namespace: "tether-system"}
	now := time.Now().UTC().Truncate(time.Microsecond) // a Lease keeps microseconds
	want := Record{
		Handler: "secret-ttl", Instances: 2, LastSeen: now, Grace: 30 * time.Second, AbsentReleaseAfter: 10 * time.Minute,
		Bindings: []*tetherv1.Binding{{Id: "tick", Kind: tetherv1.BindingKind_BINDING_KIND_TIMER,
			Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}, Retries: proto.Int32(3)}},
		Resources: []schema.GroupVersionResource{{Version: "v1", Resource: "secrets"}, {Group: "test.tether.dev", Version: "v1", Resource: "widgets"}},
		Sweep: []Scope{{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaces: []string{"a", "b"}},
			{Resource: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}}},
		Holder: "broker-0",
	}
	if err := s.Put(ctx, want); err != nil {
		t.Fatal(err)
	}
	want.Instances, want.AbsentSince = 0, now.Add(time.Second)
	if err := s.Put(ctx, want); err != nil { // an update of the same Lease
		t.Fatal(err)
	}
	got, err := s.List(ctx)
	if err != nil || len(got) != 1 {
		t.Fatalf("List = %v, %v", got, err)
	}
	g := got[0]
	if g.Handler != want.Handler || g.Instances != 0 || !g.LastSeen.Equal(want.LastSeen) || !g.AbsentSince.Equal(want.AbsentSince) ||
		g.Grace != want.Grace || g.AbsentReleaseAfter != want.AbsentReleaseAfter || g.Holder != want.Holder {
		t.Errorf("record = %+v, want %+v", g, want)
	}
	if len(g.Bindings) != 1 || !proto.Equal(g.Bindings[0], want.Bindings[0]) {
		t.Errorf("bindings = %v", g.Bindings)
	}
	if len(g.Resources) != 2 || g.Resources[0] != want.Resources[0] || g.Resources[1] != want.Resources[1] {
		t.Errorf("resources = %v", g.Resources)
	}
	if !reflect.DeepEqual(g.Sweep, want.Sweep) {
		t.Errorf("sweep = %+v, want %+v", g.Sweep, want.Sweep)
	}
	if !g.AbsentSinceOrLastSeen().Equal(want.AbsentSince) {
		t.Errorf("AbsentSinceOrLastSeen = %v", g.AbsentSinceOrLastSeen())
	}
}

func TestLastSeenStandsInWhenTheBrokerDiedWithTheHandlerConnected(t *testing.T) {
	seen := time.Now()
	r := Record{Instances: 1, LastSeen: seen}
	if !r.AbsentSinceOrLastSeen().Equal(seen) {
		t.Errorf("AbsentSinceOrLastSeen = %v, want the last renewal %v", r.AbsentSinceOrLastSeen(), seen)
	}
}

// TestAnUndecodableLeaseKeepsWhatItCan: one Lease with broken bindings does
// not hide the others, and still names its handler and resources, so that
// its holds can be found and released.
func TestAnUndecodableLeaseKeepsWhatItCan(t *testing.T) {
	ctx := context.Background()
	s := &Store{Client: kubetest.Wrap(fake.NewClientset()), Namespace: "tether-system"}
	for _, h := range []string{"good", "broken"} {
		if err := s.Put(ctx, Record{Handler: h, Grace: time.Second,
			Resources: []schema.GroupVersionResource{{Version: "v1", Resource: "secrets"}}}); err != nil {
			t.Fatal(err)
		}
	}
	leases := s.Client.CoordinationV1().Leases(s.Namespace)
	l, err := leases.Get(ctx, LeaseName("broken"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[annBindings] = "{not json"
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.List(ctx)
	if err != nil || len(got) != 2 {
		t.Fatalf("List = %v, %v; want both records", got, err)
	}
	for _, r := range got {
		switch {
		case r.Handler == "good" && r.Unreadable != nil:
			t.Errorf("good: %v", r.Unreadable)
		case r.Handler == "broken" && (r.Unreadable == nil || len(r.Resources) != 1):
			t.Errorf("broken: unreadable %v, resources %v; want an error and its resource", r.Unreadable, r.Resources)
		}
	}
}

// TestAGraceUnderASecondIsAValidLease: the API server refuses a Lease whose
// leaseDurationSeconds is 0, which a grace under a second rounded down to,
// and then no Lease ever recorded the handler. The Lease's duration is the
// grace rounded up; the record keeps the grace exactly.
func TestAGraceUnderASecondIsAValidLease(t *testing.T) {
	for _, tc := range []struct {
		grace time.Duration
		secs  int32
	}{{500 * time.Millisecond, 1}, {0, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {30 * time.Second, 30}} {
		ctx := context.Background()
		s := &Store{Client: kubetest.Wrap(fake.NewClientset()), Namespace: "tether-system"}
		if err := s.Put(ctx, Record{Handler: "h", Grace: tc.grace}); err != nil {
			t.Fatal(err)
		}
		l, err := s.Client.CoordinationV1().Leases("tether-system").Get(ctx, LeaseName("h"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := *l.Spec.LeaseDurationSeconds; got != tc.secs {
			t.Errorf("grace %v: leaseDurationSeconds %d, want %d", tc.grace, got, tc.secs)
		}
		recs, err := s.List(ctx)
		if err != nil || len(recs) != 1 || recs[0].Grace != tc.grace {
			t.Errorf("grace %v: recorded %+v, %v", tc.grace, recs, err)
		}
	}
}
