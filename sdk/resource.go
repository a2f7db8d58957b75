package sdk

import "strings"

// Resource names the Kubernetes resource a binding watches. Set Version and
// either Resource (the plural, e.g. "deployments") or Kind (e.g.
// "Deployment"); the broker resolves the other one with discovery. Group is
// "" for the core group.
type Resource struct {
	Group    string
	Version  string
	Resource string
	Kind     string
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

// String renders the resource as "group/version/resource" (or kind when the
// resource is not known), with the group left out for the core group.
func (r Resource) String() string {
	name := r.Resource
	if name == "" {
		name = r.Kind
	}
	parts := make([]string, 0, 3)
	if r.Group != "" {
		parts = append(parts, r.Group)
	}
	return strings.Join(append(parts, r.Version, name), "/")
}
