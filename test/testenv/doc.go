// Package testenv holds what the end-to-end test packages share: a writer
// that sends logs and process output to the test log, a recorder of a child
// process's output lines, a wait on a condition with a deadline, a broker
// running in the test process until the test ends, a TCP balancer standing
// for a Service over broker replicas, and a steady load of writes. Each test
// package keeps its own thin wrappers for its defaults.
package testenv
