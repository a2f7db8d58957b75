package presence

import (
	"strings"
	"testing"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func TestAnAbsentStrictHandlerWhoseIdentityCannotSignInIsOrphaned(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	strict := []*tetherv1.Binding{{Id: "d", Kind: tetherv1.BindingKind_BINDING_KIND_DELETE, Finalizer: tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT}}
	hold := []*tetherv1.Binding{{Id: "d", Kind: tetherv1.BindingKind_BINDING_KIND_DELETE}}
	sa := User{Name: "system:serviceaccount:apps:cleaner", Groups: []string{"system:serviceaccounts"}}
	absent := Record{Handler: "cleaner", Grace: 30 * time.Second, AbsentSince: now.Add(-time.Minute), Bindings: strict, User: sa}
	with := func(f func(*Record)) Record { r := absent; f(&r); return r }
	for _, c := range []struct {
		name  string
		r     Record
		id    Identity
		check bool
		want  string // a part of the reason; "" none
	}{
		{"ServiceAccount gone", absent, IdentityGone, true, "ServiceAccount apps/cleaner is deleted"},
		{"rights revoked", absent, IdentityRevoked, true, "may no longer sign in as handler cleaner"},
		{"identity still valid", absent, IdentityValid, true, ""},
		{"look failed", absent, IdentityUnknown, true, ""},
		{"a user that is no ServiceAccount", with(func(r *Record) { r.User = User{Name: "alice"} }), IdentityRevoked, true, "user alice may no longer"},
		{"in its grace", with(func(r *Record) { r.AbsentSince = now.Add(-10 * time.Second) }), IdentityGone, false, ""},
		{"present", with(func(r *Record) { r.Instances, r.AbsentSince, r.LastSeen = 1, time.Time{}, now }), IdentityGone, false, ""},
		{"no STRICT binding: grace and absent_release_after end its holds", with(func(r *Record) { r.Bindings = hold }), IdentityGone, false, ""},
		{"no identity recorded (insecure)", with(func(r *Record) { r.User = User{} }), IdentityGone, false, ""},
		{"already released", with(func(r *Record) { r.Marks.Released = now }), IdentityGone, false, ""},
		{"left with its broker: absent since last seen", with(func(r *Record) { r.AbsentSince, r.LastSeen = time.Time{}, now.Add(-time.Hour) }), IdentityGone, true, "is deleted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := NeedsIdentityCheck(c.r, now); got != c.check {
				t.Errorf("NeedsIdentityCheck = %v, want %v", got, c.check)
			}
			got := Orphan(c.r, now, c.id)
			if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
				t.Errorf("Orphan = %q, want it to say %q", got, c.want)
			}
		})
	}
}

func TestServiceAccountOfAUser(t *testing.T) {
	for _, c := range []struct {
		user     string
		ns, name string
		ok       bool
	}{
		{"system:serviceaccount:apps:cleaner", "apps", "cleaner", true},
		{"system:serviceaccount:apps", "", "", false},
		{"system:serviceaccount::x", "", "x", false},
		{"alice", "", "", false},
	} {
		ns, name, ok := User{Name: c.user}.ServiceAccount()
		if ok != c.ok || (ok && (ns != c.ns || name != c.name)) {
			t.Errorf("%q: got %q %q %v, want %q %q %v", c.user, ns, name, ok, c.ns, c.name, c.ok)
		}
	}
}
