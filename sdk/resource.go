package sdk

import "strings"

// Resource names the Kubernetes resource a binding watches, in one of two
// ways; the broker resolves it with discovery when the handler connects.
//
// Exactly: Group ("" for the core group), and Resource (the plural, e.g.
// "deployments") or Kind (e.g. "Deployment"); an empty Version is the
// group's preferred one.
//
// By Name, as kubectl takes it: the plural, the singular, a short name or the
// kind ("deployments", "deploy", "Deployment"). Group and Version narrow the
// search: both empty search every group's preferred version; an empty Group
// with a Version is the core group. The core group wins a name it shares
// with another group; a name that fits resources of several other groups is
// refused with them listed.
type Resource struct {
	Group    string
	Version  string
	Resource string
	Kind     string
	Name     string
}

// GVR names a resource by group, version and plural resource name:
// GVR("apps", "v1", "deployments"), GVR("", "v1", "secrets").
func GVR(group, version, resource string) Resource {
	return Resource{Group: group, Version: version, Resource: resource}
}

// GVK names a resource by group, version and kind:
// GVK("apps", "v1", "Deployment").
func GVK(group, version, kind string) Resource {
	return Resource{Group: group, Version: version, Kind: kind}
}

// Named names a resource by any of its names, in any group:
// Named("deployments"), Named("deploy"), Named("kopfexamples").
func Named(name string) Resource {
	return Resource{Name: name}
}

// String renders the resource as "group/version/resource" (or the kind, or
// the name), leaving out what is empty: the core group, a preferred version.
func (r Resource) String() string {
	name := r.Resource
	if name == "" {
		name = r.Kind
	}
	if name == "" {
		name = r.Name
	}
	parts := make([]string, 0, 3)
	for _, p := range []string{r.Group, r.Version, name} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "/")
}
