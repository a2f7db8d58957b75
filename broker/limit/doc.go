// Package limit bounds how many of something are under way at once, per
// key (a peer, a handler, an identity) and, optionally, in all: the Hellos
// of the session server, the token and access reviews of auth, the reviews
// admission forwards. One Counter type serves them all.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package limit
