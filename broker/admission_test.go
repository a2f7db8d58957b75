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
