package dispatch

// breakage names one deliberate way to break the hold contract, for the
// chaos checker's self-test (breaks_chaos.go); the comment says which
// invariant of test/chaos it breaks.
type breakage string

const (
	breakKeepHolds    breakage = "keep-holds"    // 1: never release a hold on deletion
	breakSkipCreates  breakage = "skip-creates"  // 2: creates marked done, never delivered
	breakSkipDeletes  breakage = "skip-deletes"  // 2: HOLD deletes marked done, never delivered
	breakSkipStrict   breakage = "skip-strict"   // 3: STRICT deletes marked done, never delivered
	breakClobber      breakage = "clobber"       // 4: a release removes every finalizer
	breakTickDeleting breakage = "tick-deleting" // 5: timers keep ticking while deleting
	breakPanic        breakage = "panic"         // 6: the broker panics on its 300th ack
)
