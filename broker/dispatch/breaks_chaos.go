//go:build chaosbreak

package dispatch

import (
	"fmt"
	"os"
)

// This file is compiled only with `-tags chaosbreak`, into the broker that
// `make chaos-selftest` runs: TETHER_CHAOS_BREAK names one way to break
// the contract, and the chaos checker must report the rule it breaks.
// A release build has none of it (breaks.go).

var chosen = func() breakage {
	b := breakage(os.Getenv("TETHER_CHAOS_BREAK"))
	if b != "" && !knownBreakage[b] {
		panic(fmt.Sprintf("TETHER_CHAOS_BREAK=%q: no such breakage", b))
	}
	return b
}()

func broken(b breakage) bool { return b == chosen }

var knownBreakage = map[breakage]bool{
	breakKeepHolds: true, breakSkipCreates: true, breakSkipDeletes: true, breakSkipStrict: true,
	breakClobber: true, breakTickDeleting: true, breakPanic: true,
}
