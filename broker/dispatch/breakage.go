package dispatch

// breakage names one deliberate way to break the contract, for the chaos
// checker's self-test (breaks_chaos.go); the comment says which rule of
// docs/design.md it breaks, the number test/chaos reports.
type breakage string

const (
	breakKeepHolds    breakage = "keep-holds"    // 3: never release a hold on deletion
	breakSkipCreates  breakage = "skip-creates"  // 6: creates marked done, never delivered
	breakSkipDeletes  breakage = "skip-deletes"  // 3: HOLD deletes marked done, never delivered
	breakSkipStrict   breakage = "skip-strict"   // 2: STRICT deletes marked done, never delivered
	breakClobber      breakage = "clobber"       // 4: a release removes every finalizer
	breakTickDeleting breakage = "tick-deleting" // 5: timers keep ticking while deleting
	breakPanic        breakage = "panic"         // 7: the broker panics on its 300th ack
)
