// Package resource resolves what a binding names (group, version and plural
// resource, or kind) to a resource the API server serves, with discovery.
// Any resource works, core or custom, so long as it supports list and watch.
package resource
