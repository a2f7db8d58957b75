package broker

import (
	"slices"
	"testing"
)

func TestTheBrokersNamespaceIsAlwaysExcludedFromWebhooks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		given []string
		want  []string
	}{
		{"the default", nil, []string{"kube-node-lease", "kube-system", "tether-system"}},
		{"kube-system opted in", []string{"kube-node-lease"}, []string{"kube-node-lease", "tether-system"}},
		{"every namespace opted in", []string{}, []string{"tether-system"}},
		{"the broker's own namespace given too", []string{"tether-system", "kube-system", "kube-system"}, []string{"kube-system", "tether-system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Admission{Listen: "127.0.0.1:0", ExcludeNamespaces: tc.given}
			if got := a.excludedNamespaces("tether-system"); !slices.Equal(got, tc.want) {
				t.Errorf("excluded %q, want %q", got, tc.want)
			}
		})
	}
	if got := (Admission{}).excludedNamespaces("x"); !slices.Equal(DefaultExcludedNamespaces, []string{"kube-system", "kube-node-lease"}) || len(got) != 3 {
		t.Errorf("excluding changed the defaults: %q, then %q", DefaultExcludedNamespaces, got)
	}
}

func TestTheBrokersUserIsAlwaysExcludedFromWebhooks(t *testing.T) {
	const own = "system:serviceaccount:tether-system:tether-broker"
	for _, tc := range []struct {
		name                  string
		users, groups         []string
		wantUsers, wantGroups []string
	}{
		{"the defaults", nil, nil,
			[]string{"system:kube-controller-manager", "system:kube-scheduler", own}, []string{"system:nodes", "system:serviceaccounts:kube-system"}},
		{"none opted out", []string{}, []string{}, []string{own}, []string{}},
		{"the broker's own user given too", []string{own, "x"}, []string{"g"}, []string{"system:serviceaccount:tether-system:tether-broker", "x"}, []string{"g"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Admission{Listen: "127.0.0.1:0", ExcludeUsers: tc.users, ExcludeGroups: tc.groups}
			users, groups := a.excludedIdentities([]string{own})
			if !slices.Equal(users, tc.wantUsers) || !slices.Equal(groups, tc.wantGroups) {
				t.Errorf("excluded users %q and groups %q, want %q and %q", users, groups, tc.wantUsers, tc.wantGroups)
			}
		})
	}
	(Admission{}).excludedIdentities([]string{own})
	if !slices.Equal(DefaultExcludedUsers, []string{"system:kube-controller-manager", "system:kube-scheduler"}) {
		t.Errorf("excluding changed the defaults: %q", DefaultExcludedUsers)
	}
}
