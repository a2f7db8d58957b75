package resource

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// catalog is one snapshot of discovery: the groups in the API server's order
// (the core group first) and the resources of each group version. Looking a
// query up in it is a pure function, so its rules are unit-tested without an
// API server.
type catalog struct {
	groups []metav1.APIGroup
	lists  map[schema.GroupVersion][]metav1.APIResource
	// failed holds the group versions whose resources discovery could not
	// list; a query that needs one of them has no verdict.
	failed map[schema.GroupVersion]error
}

func newCatalog(groups []*metav1.APIGroup, lists []*metav1.APIResourceList, failed map[schema.GroupVersion]error) (*catalog, error) {
	c := &catalog{lists: map[schema.GroupVersion][]metav1.APIResource{}, failed: failed}
	for _, g := range groups {
		c.groups = append(c.groups, *g)
	}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, fmt.Errorf("discovery listed resources under %q: %w", l.GroupVersion, err)
		}
		c.lists[gv] = l.APIResources
	}
	return c, nil
}

// lookup resolves q against the snapshot.
func (c *catalog) lookup(q Query) (Resource, error) {
	if err := q.check(); err != nil {
		return Resource{}, err
	}
	scope, err := c.scope(q)
	if err != nil {
		return Resource{}, err
	}
	var found []hit
	var unanswered error
	for _, gv := range scope {
		if err, ok := c.failed[gv]; ok {
			unanswered = fmt.Errorf("discovering %s: %w: %w", gv, ErrUnavailable, err)
			continue
		}
		if h, ok := c.match(gv, q); ok {
			found = append(found, h)
		}
	}
	if q.Name != "" && len(found) > 1 {
		// kubectl's rule, and Kopf's: a name the core group answers to is
		// the core group's ("pods", not metrics.k8s.io's pods).
		if core := slices.DeleteFunc(slices.Clone(found), func(h hit) bool { return h.Group != "" }); len(core) > 0 {
			found = core
		}
	}
	switch {
	case len(found) == 0 && unanswered != nil:
		return Resource{}, unanswered
	case len(found) == 0:
		return Resource{}, c.notFound(q, scope)
	case len(found) > 1:
		names := make([]string, len(found))
		for i, h := range found {
			names[i] = h.String()
		}
		slices.Sort(names)
		return Resource{}, fmt.Errorf("%q: %w: %s; name the group, and the version if the group has several",
			q.Name, ErrAmbiguous, strings.Join(names, ", "))
	}
	h := found[0]
	if q.Kind != "" && q.Resource != "" && h.Kind != q.Kind {
		return Resource{}, fmt.Errorf("%s in %s has kind %s, not %s", h.Resource.Resource, h.GroupVersion(), h.Kind, q.Kind)
	}
	if !slices.Contains(h.verbs, "list") || !slices.Contains(h.verbs, "watch") {
		return Resource{}, fmt.Errorf("%s in %s cannot be listed and watched", h.Resource.Resource, h.GroupVersion())
	}
	return h.Resource, nil
}

// hit is a resource that answers to a query, with its verbs.
type hit struct {
	Resource
	verbs metav1.Verbs
}

// scope is the group versions q is looked up in.
func (c *catalog) scope(q Query) ([]schema.GroupVersion, error) {
	if q.Name != "" && q.Group == "" && q.Version == "" {
		scope := make([]schema.GroupVersion, 0, len(c.groups))
		for _, g := range c.groups {
			scope = append(scope, schema.GroupVersion{Group: g.Name, Version: g.PreferredVersion.Version})
		}
		return scope, nil
	}
	i := slices.IndexFunc(c.groups, func(g metav1.APIGroup) bool { return g.Name == q.Group })
	if i < 0 {
		return nil, notFound("API group %q", q.Group)
	}
	g := c.groups[i]
	version := q.Version
	if version == "" {
		version = g.PreferredVersion.Version
	}
	if !slices.ContainsFunc(g.Versions, func(v metav1.GroupVersionForDiscovery) bool { return v.Version == version }) {
		return nil, notFound("API group %q serves no version %q (it serves %s)", g.Name, version, versions(g))
	}
	return []schema.GroupVersion{{Group: g.Name, Version: version}}, nil
}

// match finds q in one group version. A subresource ("pods/status") is
// never a match.
func (c *catalog) match(gv schema.GroupVersion, q Query) (hit, bool) {
	list := c.lists[gv]
	for _, ar := range list {
		if strings.Contains(ar.Name, "/") || !answersTo(ar, q) {
			continue
		}
		r := Resource{GroupVersionResource: gv.WithResource(ar.Name), Kind: ar.Kind, Namespaced: ar.Namespaced}
		r.HasStatus = slices.ContainsFunc(list, func(s metav1.APIResource) bool { return s.Name == ar.Name+"/status" })
		return hit{Resource: r, verbs: ar.Verbs}, true
	}
	return hit{}, false
}

func answersTo(ar metav1.APIResource, q Query) bool {
	switch {
	case q.Name != "":
		return ar.Name == q.Name || ar.SingularName == q.Name || strings.EqualFold(ar.Kind, q.Name) ||
			slices.Contains(ar.ShortNames, q.Name)
	case q.Resource != "":
		return ar.Name == q.Resource
	}
	return ar.Kind == q.Kind
}

// notFound says what q did not find, with the resources whose names are
// close to what it asked for, in any group version.
func (c *catalog) notFound(q Query, scope []schema.GroupVersion) error {
	where := "in any API group's preferred version"
	if len(scope) == 1 {
		where = "in " + scope[0].String()
		if scope[0].Group == "" {
			where += " (the core group)"
		}
	}
	err := notFound("%s %s", q.word(), where)
	if near := c.near(strings.TrimPrefix(q.word(), "kind ")); len(near) > 0 {
		err = fmt.Errorf("%w; did you mean %s?", err, strings.Join(near, ", "))
	}
	return err
}

// maxNear bounds the suggestions in one message.
const maxNear = 5

func (c *catalog) near(word string) []string {
	var out []string
	for gv, list := range c.lists {
		for _, ar := range list {
			if strings.Contains(ar.Name, "/") || !resembles(ar, word) {
				continue
			}
			if s := (Resource{GroupVersionResource: gv.WithResource(ar.Name)}).String(); !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return out[:min(len(out), maxNear)]
}

// resembles tells whether word is one of ar's names in another case or
// version, or off by a letter or two.
func resembles(ar metav1.APIResource, word string) bool {
	w := strings.ToLower(word)
	for _, n := range append([]string{ar.Name, ar.SingularName, strings.ToLower(ar.Kind)}, ar.ShortNames...) {
		if n != "" && (n == w || distance(n, w) <= 2) {
			return true
		}
	}
	return false
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func versions(g metav1.APIGroup) string {
	vs := make([]string, len(g.Versions))
	for i, v := range g.Versions {
		vs[i] = v.Version
	}
	return strings.Join(vs, ", ")
}
