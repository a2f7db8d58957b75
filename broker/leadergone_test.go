package broker

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

var leaseEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// leaseHeld is a Lease held by holder in its transitions-th tenure, last
// renewed at leaseEpoch for 15 s, carrying mark when it is not nil.
func leaseHeld(holder string, transitions int32, mark *livenessMark) *coordinationv1.Lease {
	renewed, secs := metav1.NewMicroTime(leaseEpoch), int32(15)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultLeaseName, ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseTransitions: &transitions,
			RenewTime: &renewed, AcquireTime: &renewed, LeaseDurationSeconds: &secs},
	}
	if mark != nil {
		l = withMark(l, *mark)
	}
	return l
}

// TestDecideTakeover: a follower takes the Lease before it expires only on
// strong evidence that the holder's process exited: every probe since the
// Lease was read refused, at least twice, at an address published for this
// tenure that answered this follower before. A timeout, an answer, a mark
// of another tenure or holder, a refusal from an address never seen
// answering, or an expired Lease (the elector's job) is no takeover.
func TestDecideTakeover(t *testing.T) {
	a := &livenessMark{Holder: "a", Transitions: 3, Address: "10.0.0.1:4000"}
	refused2 := []probeOutcome{probeRefused, probeRefused}
	soon, late := leaseEpoch.Add(5*time.Second), leaseEpoch.Add(16*time.Second)
	for _, tc := range []struct {
		name     string
		lease    *coordinationv1.Lease
		self     string
		answered bool
		probes   []probeOutcome
		now      time.Time
		take     bool
		reason   string
	}{
		{"the holder's process exited", leaseHeld("a", 3, a), "b", true, refused2, soon, true, reasonProcessGone},
		{"three refusals", leaseHeld("a", 3, a), "b", true, []probeOutcome{probeRefused, probeRefused, probeRefused}, soon, true, reasonProcessGone},
		{"one refusal is not enough", leaseHeld("a", 3, a), "b", true, []probeOutcome{probeRefused}, soon, false, reasonAlive},
		{"no probe", leaseHeld("a", 3, a), "b", true, nil, soon, false, reasonAlive},
		{"a refusal, then a timeout (a partition)", leaseHeld("a", 3, a), "b", true, []probeOutcome{probeRefused, probeUnknown}, soon, false, reasonAlive},
		{"a timeout (a partitioned node)", leaseHeld("a", 3, a), "b", true, []probeOutcome{probeUnknown, probeUnknown}, soon, false, reasonAlive},
		{"it answers (a paused process)", leaseHeld("a", 3, a), "b", true, []probeOutcome{probeAnswered}, soon, false, reasonAlive},
		{"refused, but never seen answering", leaseHeld("a", 3, a), "b", false, refused2, soon, false, reasonNeverAnswer},
		{"no mark", leaseHeld("a", 3, nil), "b", true, refused2, soon, false, reasonNoMark},
		{"a mark of the previous tenure", leaseHeld("a", 4, a), "b", true, refused2, soon, false, reasonNoMark},
		{"a mark of another holder", leaseHeld("c", 3, a), "b", true, refused2, soon, false, reasonNoMark},
		{"this replica holds it", leaseHeld("b", 3, &livenessMark{Holder: "b", Transitions: 3, Address: "x:1"}), "b", true, refused2, soon, false, reasonSelf},
		{"released", leaseHeld("", 3, nil), "b", true, refused2, soon, false, reasonNoHolder},
		{"expired: the elector's", leaseHeld("a", 3, a), "b", true, refused2, late, false, reasonExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			take, reason := decideTakeover(takeoverInput{Lease: tc.lease, Self: tc.self, AnsweredBefore: tc.answered, Probes: tc.probes, Now: tc.now})
			if take != tc.take || reason != tc.reason {
				t.Errorf("take %v (%s), want %v (%s)", take, reason, tc.take, tc.reason)
			}
		})
	}
}

// TestReleasedLeaseIsClientGosRelease: the Lease a takeover writes is the
// one client-go's elector writes when its holder releases it: no holder,
// a one-second duration, the transitions kept, and no liveness mark; the
// resourceVersion read stays, so the write fails if the holder renewed.
func TestReleasedLeaseIsClientGosRelease(t *testing.T) {
	l := released(leaseHeld("a", 3, &livenessMark{Holder: "a", Transitions: 3, Address: "x:1"}), leaseEpoch)
	if holderOf(l) != "" || *l.Spec.LeaseDurationSeconds != 1 || transitionsOf(l) != 3 || l.ResourceVersion != "1" {
		t.Errorf("released: %+v %s", l.Spec, l.ResourceVersion)
	}
	if _, ok := l.Annotations[LivenessAnnotation]; ok {
		t.Error("the liveness mark stayed")
	}
}

// fakeLeases is one Lease with optimistic concurrency, as the API server
// keeps it.
type fakeLeases struct {
	mu    sync.Mutex
	lease *coordinationv1.Lease
}

func (f *fakeLeases) Get(context.Context) (*coordinationv1.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lease == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "leases"}, DefaultLeaseName)
	}
	return f.lease.DeepCopy(), nil
}

func (f *fakeLeases) Update(_ context.Context, l *coordinationv1.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.ResourceVersion != f.lease.ResourceVersion {
		return apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, l.Name, nil)
	}
	rv, _ := strconv.Atoi(l.ResourceVersion)
	f.lease = l.DeepCopy()
	f.lease.ResourceVersion = strconv.Itoa(rv + 1)
	return nil
}

// renew is the holder renewing: a new resourceVersion.
func (f *fakeLeases) renew() {
	f.mu.Lock()
	defer f.mu.Unlock()
	rv, _ := strconv.Atoi(f.lease.ResourceVersion)
	f.lease.ResourceVersion = strconv.Itoa(rv + 1)
}

// TestFollowerReleasesTheLeaseOfAGoneLeader plays a follower's looks at
// the Lease against a leader's liveness address that answers, then
// refuses: the follower releases the Lease, once. The same against an
// address it never saw answer, or one that times out, leaves the Lease.
func TestFollowerReleasesTheLeaseOfAGoneLeader(t *testing.T) {
	mark := &livenessMark{Holder: "a", Transitions: 3, Address: "10.0.0.1:4000"}
	for _, tc := range []struct {
		name     string
		outcomes []probeOutcome // what each look's probes get, one after the other
		released bool
	}{
		{"answers, then refuses", []probeOutcome{probeAnswered, probeRefused, probeRefused}, true},
		{"refuses from the start", []probeOutcome{probeRefused, probeRefused, probeRefused, probeRefused}, false},
		{"answers, then times out", []probeOutcome{probeAnswered, probeUnknown, probeUnknown}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leases := &fakeLeases{lease: leaseHeld("a", 3, mark)}
			probes := tc.outcomes
			e := &earlyTakeover{leases: leases, self: "b", clock: clocktesting.NewFakeClock(leaseEpoch.Add(time.Second)), log: hclog.NewNullLogger(),
				probe: func(_ context.Context, addr string) probeOutcome {
					if addr != mark.Address {
						t.Errorf("probed %s, not the leader's liveness address", addr)
					}
					if len(probes) == 0 {
						return probeUnknown
					}
					p := probes[0]
					probes = probes[1:]
					return p
				}}
			var w watched
			for len(probes) > 0 {
				e.once(context.Background(), &w)
			}
			if got := holderOf(leases.lease) == ""; got != tc.released {
				t.Errorf("released: %v, want %v (holder %q)", got, tc.released, holderOf(leases.lease))
			}
		})
	}
}

// TestFollowerDoesNotReleaseARenewedLease: the holder renews between the
// follower's read and its write: the write conflicts and the Lease stays.
func TestFollowerDoesNotReleaseARenewedLease(t *testing.T) {
	mark := &livenessMark{Holder: "a", Transitions: 3, Address: "10.0.0.1:4000"}
	leases := &fakeLeases{lease: leaseHeld("a", 3, mark)}
	looks := 0
	e := &earlyTakeover{leases: leases, self: "b", clock: clocktesting.NewFakeClock(leaseEpoch.Add(time.Second)), log: hclog.NewNullLogger(),
		probe: func(context.Context, string) probeOutcome {
			looks++
			if looks == 1 {
				return probeAnswered
			}
			leases.renew()
			return probeRefused
		}}
	var w watched
	e.once(context.Background(), &w)
	e.once(context.Background(), &w)
	if holderOf(leases.lease) != "a" {
		t.Errorf("the Lease went from a renewing holder: %q", holderOf(leases.lease))
	}
}

// TestTheLeaseLockMarksThisReplicasTenures: the lock the elector writes
// through puts this replica's liveness mark on the Lease in the write that
// acquires or renews it, for the tenure written (its transition count);
// a release takes the mark off, and a process of the same identity without
// a liveness address (restarted in place) takes off its predecessor's.
func TestTheLeaseLockMarksThisReplicasTenures(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	leases := kube.CoordinationV1().Leases("ns")
	lock := func(address string) *markedLeaseLock {
		return &markedLeaseLock{leases: leases, namespace: "ns", name: DefaultLeaseName, identity: "a", address: address}
	}
	stored := func() *coordinationv1.Lease {
		l, err := leases.Get(ctx, DefaultLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a := lock("127.0.0.1:4000")
	if err := a.Create(ctx, leaderRecord{HolderIdentity: "a", LeaseDurationSeconds: 15, LeaderTransitions: 0}); err != nil {
		t.Fatal(err)
	}
	if m, ok := markOf(stored()); !ok || m.Address != "127.0.0.1:4000" || m.Transitions != 0 {
		t.Fatalf("created: mark %+v %v", m, ok)
	}
	if _, _, err := a.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Update(ctx, leaderRecord{HolderIdentity: "", LeaseDurationSeconds: 1, LeaderTransitions: 0}); err != nil {
		t.Fatal(err)
	}
	if _, ok := stored().Annotations[LivenessAnnotation]; ok {
		t.Error("a release left the mark")
	}
	if err := a.Update(ctx, leaderRecord{HolderIdentity: "a", LeaseDurationSeconds: 15, LeaderTransitions: 1}); err != nil {
		t.Fatal(err)
	}
	if m, ok := markOf(stored()); !ok || m.Transitions != 1 {
		t.Fatalf("acquired again: mark %+v %v", m, ok)
	}
	restarted := lock("")
	if _, _, err := restarted.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Update(ctx, leaderRecord{HolderIdentity: "a", LeaseDurationSeconds: 15, LeaderTransitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, ok := stored().Annotations[LivenessAnnotation]; ok {
		t.Error("the mark of the earlier process stayed")
	}
}

// TestProbeTellsRefusedFromAnswered: a listening port answers, the same
// port once closed refuses.
func TestProbeTellsRefusedFromAnswered(t *testing.T) {
	lis, err := livenessListener("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if p := probeTCP(context.Background(), addr); p != probeAnswered {
		t.Errorf("a listening port: %v", p)
	}
	lis.Close()
	if p := probeTCP(context.Background(), addr); p != probeRefused {
		t.Errorf("a closed port: %v", p)
	}
}

// TestLivenessAddress: the configured address, else the gRPC listener's IP when
// it is a specific one.
func TestLivenessAddress(t *testing.T) {
	for _, tc := range []struct {
		configured string
		grpc       net.Addr
		want       string
	}{
		{"", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7443}, "127.0.0.1"},
		{"", &net.TCPAddr{IP: net.IPv4zero, Port: 7443}, ""},
		{"", &net.TCPAddr{Port: 7443}, ""},
		{"10.1.2.3", &net.TCPAddr{IP: net.IPv4zero, Port: 7443}, "10.1.2.3"},
	} {
		if got := livenessAddress(tc.configured, tc.grpc); got != tc.want {
			t.Errorf("livenessAddress(%q, %v) = %q, want %q", tc.configured, tc.grpc, got, tc.want)
		}
	}
}

// TestTheLeaseLockRenewsWithAPatchThatTestsTheTenure: a renewal is a JSON
// patch that tests the Lease still names this replica in the same tenure,
// so a write of something else on the Lease since (a finalizer) does not
// fail it, and a release or another holder's acquisition does.
func TestTheLeaseLockRenewsWithAPatchThatTestsTheTenure(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	leases := kube.CoordinationV1().Leases("ns")
	a := &markedLeaseLock{leases: leases, namespace: "ns", name: DefaultLeaseName, identity: "a", address: "127.0.0.1:4000"}
	record := leaderRecord{HolderIdentity: "a", LeaseDurationSeconds: 15, LeaderTransitions: 2}
	if err := a.Create(ctx, record); err != nil {
		t.Fatal(err)
	}
	other, err := leases.Get(ctx, DefaultLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other.Finalizers = append(other.Finalizers, "broker.tether.dev/uninstall")
	if _, err := leases.Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kube.ClearActions()
	record.RenewTime = metav1.NewTime(leaseEpoch)
	if err := a.Update(ctx, record); err != nil {
		t.Fatalf("renewing after a finalizer was added: %v", err)
	}
	if acts := kube.Actions(); len(acts) != 1 || acts[0].GetVerb() != "patch" {
		t.Errorf("the renewal: %v, want one patch", acts)
	}
	got, _ := leases.Get(ctx, DefaultLeaseName, metav1.GetOptions{})
	if !got.Spec.RenewTime.Equal(&metav1.MicroTime{Time: leaseEpoch}) || len(got.Finalizers) != 1 {
		t.Errorf("after the renewal: renew time %v, finalizers %v", got.Spec.RenewTime, got.Finalizers)
	}
	if _, ok := markOf(got); !ok {
		t.Error("the renewal lost the mark")
	}
	if err := (leaseClient{leases: leases, name: DefaultLeaseName}).Update(ctx, released(got, leaseEpoch)); err != nil {
		t.Fatal(err)
	}
	if err := a.Update(ctx, record); err == nil {
		t.Error("a renewal after a release succeeded")
	}
}
