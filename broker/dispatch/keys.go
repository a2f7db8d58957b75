package dispatch

import (
	"slices"
	"time"
)

// An object has a timer binding or two, so what it keeps by binding id is
// kept in small slices: a map of one entry costs about 300 bytes, a slice
// of one 40 to 60, which is tens of megabytes at 100,000 objects with a
// timer each.

// idSet is a small set of binding ids.
type idSet []string

func (s idSet) has(id string) bool { return slices.Contains(s, id) }

func (s *idSet) add(id string) {
	if !s.has(id) {
		*s = append(*s, id)
	}
}

func (s *idSet) remove(id string) {
	if *s = slices.DeleteFunc(*s, func(x string) bool { return x == id }); len(*s) == 0 {
		*s = nil
	}
}

// dueSet is when each fired key (a binding id, or another name the
// scheduler was given) was due.
type dueSet []dueKey

type dueKey struct {
	name string
	at   time.Time
}

func (d *dueSet) set(name string, at time.Time) {
	for i := range *d {
		if (*d)[i].name == name {
			(*d)[i].at = at
			return
		}
	}
	*d = append(*d, dueKey{name, at})
}

// take removes name and returns when it was due.
func (d *dueSet) take(name string) (time.Time, bool) {
	for i, k := range *d {
		if k.name == name {
			if *d = slices.Delete(*d, i, i+1); len(*d) == 0 {
				*d = nil
			}
			return k.at, true
		}
	}
	return time.Time{}, false
}
