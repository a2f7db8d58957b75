// Package typescript builds the TypeScript SDK (sdk/typescript) for the
// tests that run it, installs the handler packages that depend on it by
// path (Install), and runs the SDK's own unit tests (node --test on the
// tsc output) as part of go test ./....
//
// The tests need node and npm on PATH: npm ci installs the SDK's pinned
// dependencies from its committed package-lock.json (from the npm
// registry, or npm's cache), and tsc builds it into sdk/typescript/build,
// which git ignores. Without node or npm they skip, saying why, except
// under TETHER_CI=1 (set by .ci/run), where they fail.
package typescript
