package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/kube"
)

// markedLeaseLock is the leader Lease as the elector uses it (what
// client-go's resourcelock.LeaseLock does), except that every write that
// makes or keeps this replica the holder also carries its liveness mark,
// and every other write (a release) takes the mark off. The mark thus
// changes in the same update as the tenure it belongs to: no extra write
// that would make the elector's next renewal conflict, and no moment when
// a new tenure carries an old mark.
type markedLeaseLock struct {
	leases          kube.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
	namespace, name string
	identity        string
	// address is this process's liveness address; empty: no mark.
	address string
	lease   *coordinationv1.Lease // as last read or written
}

func (l *markedLeaseLock) Get(ctx context.Context) (leaderRecord, []byte, error) {
	lease, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
	if err != nil {
		return leaderRecord{}, nil, err
	}
	l.lease = lease
	record := recordOf(&lease.Spec)
	raw, err := json.Marshal(record)
	if err != nil {
		return leaderRecord{}, nil, fmt.Errorf("encoding the leader election record: %w", err)
	}
	return record, raw, nil
}

func (l *markedLeaseLock) Create(ctx context.Context, ler leaderRecord) error {
	lease := l.marked(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace}}, ler)
	created, err := l.leases.Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.lease = created
	return nil
}

func (l *markedLeaseLock) Update(ctx context.Context, ler leaderRecord) error {
	if l.lease == nil {
		return errors.New("lease not initialized, call get or create first")
	}
	want := l.marked(l.lease, ler)
	var updated *coordinationv1.Lease
	var err error
	if l.renewal(want) {
		updated, err = l.renew(ctx, want)
	} else {
		updated, err = l.leases.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	l.lease = updated
	return nil
}

// renewal: want renews the tenure of this replica that l.lease shows,
// with the same mark.
func (l *markedLeaseLock) renewal(want *coordinationv1.Lease) bool {
	return holderOf(l.lease) == l.identity && holderOf(want) == l.identity &&
		transitionsOf(l.lease) == transitionsOf(want) &&
		l.lease.Annotations[LivenessAnnotation] == want.Annotations[LivenessAnnotation]
}

// renew writes want's spec with a JSON patch that tests the Lease still
// names this replica in the same tenure, in place of a resourceVersion
// precondition: a write of anything else on the Lease (the uninstall
// guard's finalizer) does not make the renewal fail and the elector fall
// back to a read and a write, three requests where one does (11 s under
// the chaos runs' worst latency, past the 10 s renew deadline). Only this
// replica writes its own identity with this tenure's transition count, so
// the test fails whenever anyone else took or released the Lease since.
func (l *markedLeaseLock) renew(ctx context.Context, want *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/spec/holderIdentity", "value": l.identity},
		{"op": "test", "path": "/spec/leaseTransitions", "value": transitionsOf(want)},
		{"op": "replace", "path": "/spec", "value": want.Spec},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the renewal of the leader Lease: %w", err)
	}
	return l.leases.Patch(ctx, l.name, types.JSONPatchType, patch, metav1.PatchOptions{})
}

// marked is lease with the record ler, and this replica's liveness mark
// when ler names it and it has one; no mark otherwise.
func (l *markedLeaseLock) marked(lease *coordinationv1.Lease, ler leaderRecord) *coordinationv1.Lease {
	out := withoutMark(lease)
	out.Spec = ler.spec()
	if ler.HolderIdentity == l.identity && l.address != "" {
		out = withMark(out, livenessMark{Holder: l.identity, Transitions: int32(ler.LeaderTransitions), Address: l.address})
	}
	return out
}

func (l *markedLeaseLock) Describe() string { return l.namespace + "/" + l.name }

func (l *markedLeaseLock) Identity() string { return l.identity }
