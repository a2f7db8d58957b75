package contract

import "time"

// Presence is where a handler stands, as far as its holds are concerned.
type Presence int

const (
	// Present: an instance is connected.
	Present Presence = iota
	// InGrace: no instance is connected, but not yet for a full grace
	// counted from when this broker could accept one. Nothing is released.
	InGrace
	// Absent: past the grace. Objects being deleted are released (3c).
	Absent
	// LongAbsent: past absent_release_after. Holds come off live objects
	// too (3d), and are added again when the handler returns.
	LongAbsent
)

func (p Presence) String() string {
	switch p {
	case Present:
		return "present"
	case InGrace:
		return "in-grace"
	case Absent:
		return "absent"
	case LongAbsent:
		return "long-absent"
	}
	return "unknown"
}

// Absence is what a handler's presence is worked out from.
type Absence struct {
	// Connected: an instance of the handler is connected.
	Connected bool
	// Since is when the last instance left, as this broker saw it or as the
	// handler's Lease recorded it. Zero while none has left: then the
	// handler is in its grace, and nothing is released.
	Since time.Time
	// Accepting is when this broker could first accept the handler's
	// instances: a broker that just started (or just took over) must give
	// every handler it knows a full grace from then, however long ago the
	// Lease says the handler left, or a restart would release holds. Zero:
	// not yet, and then nothing is released.
	Accepting time.Time
	// Grace and ReleaseAfter are the handler's limits; a ReleaseAfter of
	// zero means never.
	Grace, ReleaseAfter time.Duration
}

// At returns the handler's presence at now and when it next changes by
// itself (zero: not without an instance connecting or leaving, or the
// broker starting to accept).
//
// The grace runs from the later of Since and Accepting. Long absence runs
// from Since, as the handler's own absence, but never ends before the
// grace does: a restart releases nothing before a full grace has passed.
func (a Absence) At(now time.Time) (Presence, time.Time) {
	if a.Connected {
		return Present, time.Time{}
	}
	if a.Accepting.IsZero() || a.Since.IsZero() {
		// Not accepting yet, or no instance has left: a handler is being
		// set up for the instance that is connecting.
		return InGrace, time.Time{}
	}
	since := a.Since
	graceEnd := later(since, a.Accepting).Add(a.Grace)
	if now.Before(graceEnd) {
		return InGrace, graceEnd
	}
	if a.ReleaseAfter <= 0 {
		return Absent, time.Time{}
	}
	longEnd := later(since.Add(a.ReleaseAfter), graceEnd)
	if now.Before(longEnd) {
		return Absent, longEnd
	}
	return LongAbsent, time.Time{}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
