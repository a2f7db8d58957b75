package dispatch

import (
	"context"
	"slices"
	"testing"

	"github.com/tether-dev/tether/broker/binding"
)

// An object a user changes while its update is being delivered must get a
// pass for that change: the pass settles the state it decided on (or the
// answer to its own write), never a newer one the informer brought
// meanwhile.
func TestAChangeMadeDuringADeliveryIsDeliveredNext(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bindings []*binding.Binding
		want     []string
	}{
		{
			name:     "the pass writes its outcome",
			bindings: []*binding.Binding{bind("u", binding.Update, binding.PolicyHold)},
			want:     []string{"update u", "update u"},
		},
		{
			name: "an event binding beside it",
			bindings: []*binding.Binding{
				bind("u", binding.Update, binding.PolicyNone),
				bind("e", binding.Event, binding.PolicyNone),
			},
			want: []string{"update u", "update u"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPassTest(t, tc.bindings...)
			o := p.see(held(handledAs(t, sized("2", 2, "red"), sized("1", 1, "red"))), watchModified, false)
			p.dl.during = func(b *binding.Binding) {
				if b.ID != "u" {
					return
				}
				p.dl.during = nil
				// The user's change lands after anything the broker writes
				// for size 2: a resourceVersion newer than its answer.
				p.see(held(handledAs(t, sized("9", 3, "red"), sized("2", 2, "red"))), watchModified, false)
			}
			p.r.reconcile(context.Background(), o.uid)
			p.r.reconcile(context.Background(), o.uid)
			var updates []string
			for _, k := range p.dl.kinds() {
				if k == "update u" {
					updates = append(updates, k)
				}
			}
			if !slices.Equal(updates, tc.want) {
				t.Errorf("delivered %q (settled %q), want %q: the change to size 3 made during the first delivery was lost",
					p.dl.kinds(), o.settled, tc.want)
			}
		})
	}
}

// TestAChangeThatLandsBeforeThePassesWriteIsDeliveredNext: the user's
// change reaches the API server after the delivery began but before the
// pass writes its outcome, so the write's answer carries the change (the
// write is guarded on the hold and the annotations, not on the
// resourceVersion). That answer is not what the pass decided on: the
// change still gets its own update.
func TestAChangeThatLandsBeforeThePassesWriteIsDeliveredNext(t *testing.T) {
	p := newPassTest(t, bind("u", binding.Update, binding.PolicyHold))
	o := p.see(held(handledAs(t, sized("2", 2, "red"), sized("1", 1, "red"))), watchModified, false)
	userChange := held(handledAs(t, sized("3", 3, "red"), sized("1", 1, "red")))
	p.dl.during = func(*binding.Binding) {
		p.dl.during = nil
		p.w.ahead = userChange.DeepCopy()
	}
	p.r.reconcile(context.Background(), o.uid)
	// The informer now brings the user's change, older than the write's
	// answer the pass already remembered.
	p.see(userChange, watchModified, false)
	p.r.reconcile(context.Background(), o.uid)
	if got := p.dl.kinds(); !slices.Equal(got, []string{"update u", "update u"}) {
		t.Errorf("delivered %q (settled %q), want two updates: the change to size 3 that landed before the pass's write was lost",
			got, o.settled)
	}
}
