// Package gobin builds the Go commands that end-to-end tests run as real
// processes (test handlers, the broker), once per test binary and set of
// build flags. The binaries go to a fresh folder under the system's temp
// dir each run; the Go build cache makes the builds after the first quick.
package gobin
