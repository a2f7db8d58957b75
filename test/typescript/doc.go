// Package typescript builds the TypeScript SDK (sdk/typescript) for the
// tests that run it, installs the handler packages that depend on it by
// path (Install), and runs the SDK's own unit tests (node --test on the
// tsc output) as part of go test ./....
//
// Its end-to-end tests run the SDK against the real control plane
// (test/controlplane) and broker processes: everyreplica/handler.js, a
// node process with a fail-closed validate binding, keeps a session to
// each of two broker replicas while the leader is SIGKILLed under load
// (TestATypeScriptHandlersReviewsSurviveTheLeadersSIGKILL).
//
// The tests need node and npm on PATH: npm ci installs the SDK's pinned
// dependencies from its committed package-lock.json (from the npm
// registry, or npm's cache), and tsc builds it into sdk/typescript/build,
// which git ignores. Without node or npm they skip, saying why, except
// under TETHER_CI=1 (set by .ci/run), where they fail.
package typescript
