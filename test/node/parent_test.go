package node

import "testing"

func TestParentOfReadsTheFieldAfterTheState(t *testing.T) {
	for stat, want := range map[string]int{
		"773 (broker) S 741 773 773 0 -1 4194560": 741,
		"12 (a b) c) R 1 12 12 0":                 1,
		"garbage":                                 0,
		"5 (x)":                                   0,
	} {
		if got := parentOf(stat); got != want {
			t.Errorf("parentOf(%q) = %d, want %d", stat, got, want)
		}
	}
}
