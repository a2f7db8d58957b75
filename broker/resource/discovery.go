package resource

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker/kube"
)

// Discovery is what the resolver reads of the API server's discovery: the
// methods of client-go's discovery client it calls, so that client-go's
// fake serves tests. The broker's is NewDiscovery: client-go's discovery
// package imports the clientset's scheme (package kube says what that
// costs).
type Discovery interface {
	ServerGroups() (*metav1.APIGroupList, error)
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// discoveryTimeout bounds one discovery request, as client-go's discovery
// client does when the config sets no timeout.
const discoveryTimeout = 32 * time.Second

// NewDiscovery reads discovery from the API server of cfg: /api and /apis
// for the groups, then each group version's resources.
func NewDiscovery(cfg *rest.Config) (Discovery, error) {
	c := rest.CopyConfig(cfg)
	c.ContentType, c.AcceptContentTypes = "application/json", "application/json"
	c.GroupVersion = nil
	c.NegotiatedSerializer = kube.Codecs.WithoutConversion() // to read errors (Status)
	if c.Timeout == 0 {
		c.Timeout = discoveryTimeout
	}
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("creating the discovery client: %w", err)
	}
	return restDiscovery{rc}, nil
}

type restDiscovery struct{ c rest.Interface }

func (d restDiscovery) get(path string, into any) error {
	raw, err := d.c.Get().AbsPath(path).Do(context.Background()).Raw()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

// ServerGroups lists the core group (from /api) first, then the others.
// A 404 or 403 on either is no group there, as for client-go.
func (d restDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	var core metav1.APIVersions
	if err := d.get("/api", &core); err != nil && !absent(err) {
		return nil, err
	}
	var groups metav1.APIGroupList
	if err := d.get("/apis", &groups); err != nil && !absent(err) {
		return nil, err
	}
	if len(core.Versions) == 0 {
		return &groups, nil
	}
	g := metav1.APIGroup{}
	for _, v := range core.Versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	groups.Groups = append([]metav1.APIGroup{g}, groups.Groups...)
	return &groups, nil
}

func (d restDiscovery) ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error) {
	path := "/apis/" + groupVersion
	if groupVersion == "v1" {
		path = "/api/v1"
	}
	l := metav1.APIResourceList{GroupVersion: groupVersion}
	if err := d.get(path, &l); err != nil && !(groupVersion == "v1" && absent(err)) {
		return nil, err
	}
	l.GroupVersion = groupVersion
	return &l, nil
}

// absent: the API server answered that there is nothing there for the
// broker, which client-go's discovery takes as no resources.
func absent(err error) bool { return apierrors.IsNotFound(err) || apierrors.IsForbidden(err) }

// serverGroupsAndResources reads every group and, in parallel, the
// resources of each of their versions. A group version whose resources
// could not be read (an aggregated API that is down) is in failed, with
// its error; the others are still answered.
func serverGroupsAndResources(d Discovery) ([]*metav1.APIGroup, []*metav1.APIResourceList, map[schema.GroupVersion]error, error) {
	list, err := d.ServerGroups()
	if err != nil {
		return nil, nil, nil, err
	}
	groups := make([]*metav1.APIGroup, len(list.Groups))
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		byGV   = map[schema.GroupVersion]*metav1.APIResourceList{}
		failed map[schema.GroupVersion]error
		order  []schema.GroupVersion
	)
	for i := range list.Groups {
		groups[i] = &list.Groups[i]
		for _, v := range list.Groups[i].Versions {
			gv := schema.GroupVersion{Group: list.Groups[i].Name, Version: v.Version}
			order = append(order, gv)
			wg.Go(func() {
				l, err := d.ServerResourcesForGroupVersion(gv.String())
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if failed == nil {
						failed = map[schema.GroupVersion]error{}
					}
					failed[gv] = err
				}
				if l != nil {
					byGV[gv] = l
				}
			})
		}
	}
	wg.Wait()
	var lists []*metav1.APIResourceList // in the order of the groups
	for _, gv := range order {
		if l, ok := byGV[gv]; ok {
			lists = append(lists, l)
		}
	}
	return groups, lists, failed, nil
}
