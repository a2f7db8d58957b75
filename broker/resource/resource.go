package resource

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource is a resolved resource.
type Resource struct {
	schema.GroupVersionResource
	Kind       string
	Namespaced bool
	// HasStatus tells whether the resource has a status subresource, so a
	// handler's status patch must be written there.
	HasStatus bool
}

// String is the resource as kubectl spells it: "secrets.v1." or
// "widgets.v1.test.tether.dev".
func (r Resource) String() string {
	return r.Resource + "." + r.Version + "." + r.Group
}

// Query is what a binding asks for: exactly one of Resource (the plural),
// Kind and Name.
//
// With Resource or Kind, Group is the resource's group ("" for the core
// group) and Version may be empty for the group's preferred version.
//
// Name is any name the resource goes by: its plural, its singular, one of its
// short names or its kind (case-insensitively). Group and Version narrow the
// search: an empty Group with an empty Version searches the preferred version
// of every group; an empty Group with a Version searches the core group. When
// the name fits resources in several groups, the core group's wins, as in
// kubectl; otherwise the query is ambiguous.
type Query struct {
	Group, Version, Resource, Kind, Name string
}

func (q Query) check() error {
	set := 0
	for _, s := range []string{q.Resource, q.Kind, q.Name} {
		if s != "" {
			set++
		}
	}
	switch {
	case set == 0:
		return errors.New("resource, kind or name is required")
	case q.Name != "" && set > 1:
		return errors.New("name is given with resource or kind: give the name alone, or resource and kind")
	}
	return nil
}

// word is what the query names, for messages.
func (q Query) word() string {
	switch {
	case q.Name != "":
		return q.Name
	case q.Resource != "":
		return q.Resource
	}
	return "kind " + q.Kind
}

// ErrNotFound is returned when the API server serves nothing that matches.
var ErrNotFound = errors.New("resource not found")

// ErrAmbiguous is returned when a name fits several resources and none of
// them is in the core group.
var ErrAmbiguous = errors.New("the name fits several resources")

// ErrUnavailable is returned when discovery failed to get an answer (the
// API server out of reach, a 5xx): no verdict on the query, which a retry
// may resolve.
var ErrUnavailable = errors.New("the API server did not answer discovery")

func notFound(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrNotFound)
}
