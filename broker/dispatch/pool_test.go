package dispatch

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/session"
)

// TestPoolMovesOnlyTheObjectsOfTheInstanceThatLeft: rendezvous hashing
// spreads objects evenly, and an instance leaving moves its own objects
// only; every change closes the channel the waiters hold.
func TestPoolMovesOnlyTheObjectsOfTheInstanceThatLeft(t *testing.T) {
	p := newPool()
	ins := []*session.Instance{{Handler: "h", ID: "i0"}, {Handler: "h", ID: "i1"}, {Handler: "h", ID: "i2"}}
	if !p.add(ins[0]) {
		t.Error("the first instance was not reported first")
	}
	for _, in := range ins[1:] {
		if p.add(in) {
			t.Errorf("%s reported first", in.ID)
		}
	}
	const n = 3000
	before := map[types.UID]*session.Instance{}
	share := map[string]int{}
	for i := range n {
		uid := types.UID(fmt.Sprintf("uid-%d", i))
		in, _ := p.owner(uid)
		before[uid] = in
		share[in.ID]++
	}
	for id, c := range share {
		if c < n/3*8/10 || c > n/3*12/10 {
			t.Errorf("%s owns %d of %d objects: %v", id, c, n, share)
		}
	}
	_, changed := p.owner("x")
	if p.remove(ins[1]) {
		t.Error("reported empty with two instances left")
	}
	select {
	case <-changed:
	default:
		t.Error("removing an instance did not close the changes channel")
	}
	for uid, was := range before {
		now, _ := p.owner(uid)
		if was != ins[1] && now != was {
			t.Fatalf("%s moved from %s to %s though its owner stayed", uid, was.ID, now.ID)
		}
		if now == ins[1] {
			t.Fatalf("%s still owned by the instance that left", uid)
		}
	}
	p.remove(ins[0])
	if !p.remove(ins[2]) || p.len() != 0 {
		t.Error("not reported empty once every instance left")
	}
	if in, _ := p.owner("x"); in != nil {
		t.Errorf("an empty pool chose %s", in.ID)
	}
}
