package main

import (
	"fmt"
	"io"
	"time"

	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/presence"
)

// staleAfter is how long a present handler's Lease may go unrenewed before
// status doubts that a broker leads.
const staleAfter = 30 * time.Second

// printStuck lists the objects being deleted that r's handler has held past
// --stuck-after, as the leader recorded them on its Lease, with why each
// hold stays in the words of its HoldStuck Event. When no broker renews
// the Lease, the reason is that none leads.
func printStuck(w io.Writer, r presence.Record, now time.Time) {
	if r.Stuck.Total == 0 {
		return
	}
	notLeading := ""
	if r.Instances > 0 && now.Sub(r.LastSeen) > staleAfter {
		_, notLeading = contract.WhyHeld(contract.Stay{})
	}
	fmt.Fprintf(w, "\nhandler %s holds %d object(s) being deleted past --stuck-after:\n", r.Handler, r.Stuck.Total)
	for _, o := range r.Stuck.Objects {
		why := o.Why
		if notLeading != "" {
			why = notLeading
		}
		name := o.Name
		if o.Namespace != "" {
			name = o.Namespace + "/" + name
		}
		fmt.Fprintf(w, "  %s %s stuck for %v: %s\n", o.Resource, name, now.Sub(o.Since).Round(time.Second), why)
	}
	if more := r.Stuck.Total - len(r.Stuck.Objects); more > 0 {
		fmt.Fprintf(w, "  and %d more (the Lease records the oldest %d)\n", more, presence.MaxStuckRecorded)
	}
}
