// Package resource resolves what a binding names to a resource the API
// server serves. A binding names its resource by group, version and plural,
// by kind, or, as kubectl and Kopf users do, by any name the resource goes by
// (plural, singular, short name or kind), with the group and version left out
// when they are not needed.
//
// The resolver keeps one snapshot of discovery (a catalog) and looks each
// query up in it with a pure function; a query the snapshot cannot answer
// refreshes it, at most once per MinRefresh, so a custom resource created
// after the broker started is found and a flood of unknown names costs the
// API server one discovery a second at most. Any resource works, core or
// custom, so long as it supports list and watch.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package resource
