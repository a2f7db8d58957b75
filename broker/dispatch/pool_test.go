package dispatch

import (
	"fmt"
	"slices"
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

// TestPoolGivesEverythingToTheHighestPriority: instances of a higher
// priority take every object and every review while connected, shared
// among them by the hash; once they leave, the others share again, each
// object back on the instance it had.
func TestPoolGivesEverythingToTheHighestPriority(t *testing.T) {
	a, b := &session.Instance{Handler: "h", ID: "a"}, &session.Instance{Handler: "h", ID: "b"}
	dev, dev2 := &session.Instance{Handler: "h", ID: "dev", Priority: 5}, &session.Instance{Handler: "h", ID: "dev2", Priority: 5}
	steps := []struct {
		name        string
		add, remove []*session.Instance
		// owners are the instances that must each own a fair share of the
		// objects; no other may own any, nor be the least busy.
		owners []*session.Instance
	}{
		{name: "two at 0 share", add: []*session.Instance{a, b}, owners: []*session.Instance{a, b}},
		{name: "a 5 joins: it owns all", add: []*session.Instance{dev}, owners: []*session.Instance{dev}},
		{name: "another 5 joins: the 5s share", add: []*session.Instance{dev2}, owners: []*session.Instance{dev, dev2}},
		{name: "one 5 leaves: the other owns all", remove: []*session.Instance{dev}, owners: []*session.Instance{dev2}},
		{name: "the 5 leaves: the 0s share again", remove: []*session.Instance{dev2}, owners: []*session.Instance{a, b}},
	}
	const n = 600
	p := newPool()
	was := map[types.UID]*session.Instance{} // each object's owner at priority 0
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			_, changed := p.owner("x")
			for _, in := range st.add {
				p.add(in)
			}
			for _, in := range st.remove {
				p.remove(in)
			}
			select {
			case <-changed:
			default:
				t.Error("the change did not close the changes channel")
			}
			share := map[*session.Instance]int{}
			for i := range n {
				uid := types.UID(fmt.Sprintf("uid-%d", i))
				in, _ := p.owner(uid)
				share[in]++
				if in.Priority > 0 {
					continue
				}
				if w, ok := was[uid]; ok && w != in {
					t.Errorf("%s back on %s, it was on %s", uid, in.ID, w.ID)
				}
				was[uid] = in
			}
			for _, in := range st.owners {
				if share[in] < n/len(st.owners)*8/10 {
					t.Errorf("%s owns %d of %d objects, want a fair share among %d", in.ID, share[in], n, len(st.owners))
				}
				delete(share, in)
			}
			for in, c := range share {
				t.Errorf("%s (priority %d) owns %d objects, want none", in.ID, in.Priority, c)
			}
			if in, _ := p.leastBusy(); !slices.Contains(st.owners, in) {
				t.Errorf("leastBusy chose %s (priority %d)", in.ID, in.Priority)
			}
		})
	}
}
