package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
)

// markedLeaseLock is the leader Lease as client-go's elector uses it (what
// resourcelock.LeaseLock does), except that every write that makes or keeps
// this replica the holder also carries its liveness mark, and every other
// write (a release) takes the mark off. The mark thus changes in the same
// update as the tenure it belongs to: no extra write that would make the
// elector's next renewal conflict, and no moment when a new tenure carries
// an old mark.
type markedLeaseLock struct {
	leases          coordinationclient.LeaseInterface
	namespace, name string
	identity        string
	// address is this process's liveness address; empty: no mark.
	address string
	lease   *coordinationv1.Lease // as last read or written
}

var _ rl.Interface = (*markedLeaseLock)(nil)

func (l *markedLeaseLock) Get(ctx context.Context) (*rl.LeaderElectionRecord, []byte, error) {
	lease, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	l.lease = lease
	record := rl.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	raw, err := json.Marshal(*record)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the leader election record: %w", err)
	}
	return record, raw, nil
}

func (l *markedLeaseLock) Create(ctx context.Context, ler rl.LeaderElectionRecord) error {
	lease := l.marked(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace}}, ler)
	created, err := l.leases.Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.lease = created
	return nil
}

func (l *markedLeaseLock) Update(ctx context.Context, ler rl.LeaderElectionRecord) error {
	if l.lease == nil {
		return errors.New("lease not initialized, call get or create first")
	}
	updated, err := l.leases.Update(ctx, l.marked(l.lease, ler), metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.lease = updated
	return nil
}

// marked is lease with the record ler, and this replica's liveness mark
// when ler names it and it has one; no mark otherwise.
func (l *markedLeaseLock) marked(lease *coordinationv1.Lease, ler rl.LeaderElectionRecord) *coordinationv1.Lease {
	out := withoutMark(lease)
	out.Spec = rl.LeaderElectionRecordToLeaseSpec(&ler)
	if ler.HolderIdentity == l.identity && l.address != "" {
		out = withMark(out, livenessMark{Holder: l.identity, Transitions: int32(ler.LeaderTransitions), Address: l.address})
	}
	return out
}

// RecordEvent records nothing: the broker logs its transitions.
func (l *markedLeaseLock) RecordEvent(string) {}

func (l *markedLeaseLock) Describe() string { return l.namespace + "/" + l.name }

func (l *markedLeaseLock) Identity() string { return l.identity }
