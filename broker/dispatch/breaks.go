//go:build !chaosbreak

package dispatch

// broken reports whether the broker was built to break the contract in
// way b, to show that the chaos checker catches it (breaks_chaos.go). In
// every other build nothing is broken, and the compiler drops the checks.
func broken(breakage) bool { return false }
