// Package sdktest runs an [sdk.Handler] against a broker in memory, so that
// handler authors test their functions without a cluster: deliver a create,
// update, delete, tick or admission review to the registered function, and
// read back its outcome, patches and result, as plain Go values.
//
//	b := sdktest.New(t)
//	h := sdk.New("replicator", b.Options()...)
//	h.OnCreate(sdk.GVR("", "v1", "secrets"), replicate)
//	b.Run(h)
//	got := b.Create(secret)
//	if got.Outcome != sdktest.OK || got.Patch["metadata"] == nil { ... }
//
// The handler runs for real, over gRPC on an in-memory connection; only the
// broker is played. It delivers what it is told to, to the binding it is
// told to, with no selectors, holds or retries of its own: those are the
// broker's, tested by the broker's end-to-end suites.
package sdktest
