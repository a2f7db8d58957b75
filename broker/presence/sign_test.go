package presence

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tether-dev/tether/broker/kube/kubetest"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestSignatureSaysWhetherTheBrokerWroteTheRecord: a record Put with a
// key verifies with that key; any signed field changed, another key, or
// the signature removed does not.
func TestSignatureSaysWhetherTheBrokerWroteTheRecord(t *testing.T) {
	key := &Key{Secret: []byte("0123456789abcdef0123456789abcdef")}
	other := &Key{Secret: []byte("fedcba9876543210fedcba9876543210")}
	now := time.Now()
	rec := Record{
		Handler: "real", Instances: 1, LastSeen: now, Grace: time.Minute, AbsentReleaseAfter: time.Hour,
		Bindings: []*tetherv1.Binding{{Id: "d", Kind: tetherv1.BindingKind_BINDING_KIND_DELETE,
			Resource: &tetherv1.Resource{Version: "v1", Resource: "configmaps"}, Namespaces: []string{"a"}}},
		Resources: []schema.GroupVersionResource{{Version: "v1", Resource: "configmaps"}},
		Holder:    "broker-0", User: User{Name: "system:serviceaccount:a:real"},
	}
	for _, tc := range []struct {
		name   string
		key    *Key // List's; Put signs with key
		change func(l *coordinationv1.Lease)
		want   Signature
	}{
		{name: "as written", key: key, want: SignatureValid},
		{name: "marks added", key: key, want: SignatureValid, change: func(l *coordinationv1.Lease) {
			l.Annotations[annReleaseRequested], l.Annotations[annOrphaned] = now.Format(time.RFC3339Nano), "gone"
		}},
		{name: "sweep added", key: key, want: SignatureMismatch, change: func(l *coordinationv1.Lease) {
			l.Annotations[annSweep] = `[{"resource":"widgets.v1.test.tether.dev"}]`
		}},
		{name: "user changed", key: key, want: SignatureMismatch, change: func(l *coordinationv1.Lease) {
			l.Annotations[annUser] = `{"name":"admin","groups":["system:masters"]}`
		}},
		{name: "bindings changed", key: key, want: SignatureMismatch, change: func(l *coordinationv1.Lease) {
			l.Annotations[annBindings] = `[]`
		}},
		{name: "grace changed", key: key, want: SignatureMismatch, change: func(l *coordinationv1.Lease) {
			l.Annotations[annGrace] = "1ns"
		}},
		{name: "absent since set", key: key, want: SignatureMismatch, change: func(l *coordinationv1.Lease) {
			l.Annotations[annAbsentSince] = now.Add(-time.Hour).Format(time.RFC3339Nano)
		}},
		{name: "renewal moved", key: key, want: SignatureMismatch, change: func(l *coordinationv1.Lease) {
			r := metav1.NewMicroTime(now.Add(-time.Hour))
			l.Spec.RenewTime = &r
		}},
		{name: "handler label changed", key: key, want: SignatureMismatch, change: func(l *coordinationv1.Lease) {
			l.Labels[LabelHandler] = "other"
		}},
		{name: "signature garbled", key: key, want: SignatureMismatch, change: func(l *coordinationv1.Lease) {
			l.Annotations[annSignature] = "v1:not base64!"
		}},
		{name: "another key", key: other, want: SignatureMismatch},
		{name: "unsigned", key: key, want: SignatureNone, change: func(l *coordinationv1.Lease) {
			delete(l.Annotations, annSignature)
		}},
		{name: "no key to check with", key: nil, want: SignatureUnchecked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			if err := (&Store{Client: kubetest.Wrap(client), Namespace: "ns", Key: key}).Put(ctx, rec); err != nil {
				t.Fatal(err)
			}
			if tc.change != nil {
				leases := client.CoordinationV1().Leases("ns")
				l, err := leases.Get(ctx, LeaseName("real"), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				tc.change(l)
				if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := (&Store{Client: kubetest.Wrap(client), Namespace: "ns", Key: tc.key}).List(ctx)
			if err != nil || len(got) != 1 {
				t.Fatalf("List = %v, %v", got, err)
			}
			if got[0].Signature != tc.want {
				t.Errorf("Signature = %v, want %v", got[0].Signature, tc.want)
			}
		})
	}
}

// TestTrustTakesUnsignedRecordsOnlyForAnUpgrade: a valid signature is
// trusted as written, a mismatch never; an unsigned record is re-checked
// within UnsignedAcceptedFor of the key's creation and refused after it.
func TestTrustTakesUnsignedRecordsOnlyForAnUpgrade(t *testing.T) {
	created := time.Now()
	key := &Key{Secret: []byte("k"), Created: created}
	for _, tc := range []struct {
		sig  Signature
		key  *Key
		at   time.Duration // after the key's creation
		want Trust
	}{
		{sig: SignatureValid, key: key, want: TrustSigned},
		{sig: SignatureMismatch, key: key, want: TrustNone},
		{sig: SignatureNone, key: key, at: time.Minute, want: TrustRecheck},
		{sig: SignatureNone, key: key, at: UnsignedAcceptedFor, want: TrustNone},
		{sig: SignatureUnchecked, key: nil, at: 2 * UnsignedAcceptedFor, want: TrustRecheck},
	} {
		got, why := tc.key.Trust(Record{Signature: tc.sig}, created.Add(tc.at))
		if got != tc.want || (got == TrustNone) != (why != "") {
			t.Errorf("Trust(%v, +%v) = %v, %q; want %v", tc.sig, tc.at, got, why, tc.want)
		}
	}
}
