package presence

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func TestRecordRoundTripsThroughItsLease(t *testing.T) {
	ctx := context.Background()
	s := &Store{Client: fake.NewClientset(), Namespace: "tether-system"}
	now := time.Now().UTC().Truncate(time.Microsecond) // a Lease keeps microseconds
	want := Record{
		Handler: "secret-ttl", Instances: 2, LastSeen: now, Grace: 30 * time.Second, AbsentReleaseAfter: 10 * time.Minute,
		Bindings: []*tetherv1.Binding{{Id: "tick", Kind: tetherv1.BindingKind_BINDING_KIND_TIMER,
			Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}, Retries: proto.Int32(3)}},
		Resources: []schema.GroupVersionResource{{Version: "v1", Resource: "secrets"}, {Group: "test.tether.dev", Version: "v1", Resource: "widgets"}},
		Holder:    "broker-0",
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
