// Package session serves the Connect stream: one session per handler
// instance. It reads Hello within a deadline, validates every binding (a bad
// one ends the stream with InvalidArgument naming the binding and field),
// answers Welcome, and then turns the stream into an Instance: a plain Go
// value with Deliver, which sends one delivery within the instance's window
// and waits for its ack.
//
// Two goroutines own the stream: one receives, one sends. Everything else
// talks to them through channels and selects on the session's context, so a
// session that ends can never strand a goroutine.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package session
