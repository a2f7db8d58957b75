// Package cpuprofile is the -cpuprofile flag of the bench's handler
// processes (test/bench/handler, test/bench/timerhandler): a CPU profile of
// the process's whole run, written to a file.
package cpuprofile
