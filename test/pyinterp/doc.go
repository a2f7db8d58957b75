// Package pyinterp names the Python interpreter that runs handlers on the
// Python SDK in the end-to-end tests, the chaos run and the benchmarks, and
// says why it cannot where it cannot. It imports nothing of Tether, so that
// commands (the bench) use it as well as tests.
package pyinterp
