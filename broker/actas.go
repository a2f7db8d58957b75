package broker

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/informer"
)

// maxActAsClients bounds the cached impersonating clients: one per handler
// identity; past it a client is made for each write.
const maxActAsClients = 1024

// actAs makes the clients that write a handler's patches as the handler's
// own identity (impersonation), so that its RBAC and every webhook judge
// them as if it wrote them. A ServiceAccount is impersonated by its name
// alone (the API server adds its groups), which the handler's install
// grants the broker by name (auth.ImpersonateRight, asked at Hello);
// another user needs its groups and extras too, and the right to
// impersonate those, which deploy/ does not grant.
type actAs struct {
	cfg *rest.Config

	mu      sync.Mutex
	clients map[string]rest.Interface
}

func newActAs(cfg *rest.Config) *actAs {
	return &actAs{cfg: cfg, clients: map[string]rest.Interface{}}
}

// client returns a client made by informer.NewClient, as dispatch's
// writers are.
func (a *actAs) client(u authenticationv1.UserInfo) (rest.Interface, error) {
	imp := impersonation(u)
	key := identityKey(imp)
	a.mu.Lock()
	c, ok := a.clients[key]
	a.mu.Unlock()
	if ok {
		return c, nil
	}
	cfg := rest.CopyConfig(a.cfg)
	cfg.Impersonate = imp
	c, err := informer.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("making a client that writes as %s: %w", u.Username, err)
	}
	a.mu.Lock()
	if len(a.clients) < maxActAsClients {
		a.clients[key] = c
	}
	a.mu.Unlock()
	return c, nil
}

// impersonation is how a client acts as u.
func impersonation(u authenticationv1.UserInfo) rest.ImpersonationConfig {
	imp := rest.ImpersonationConfig{UserName: u.Username}
	if _, _, sa := auth.ServiceAccountOf(u.Username); !sa {
		imp.Groups = u.Groups
		imp.UID = u.UID
		imp.Extra = map[string][]string{}
		for k, v := range u.Extra {
			imp.Extra[k] = v
		}
	}
	return imp
}

func identityKey(imp rest.ImpersonationConfig) string {
	var b strings.Builder
	b.WriteString(imp.UserName + "\x00" + imp.UID + "\x00" + strings.Join(imp.Groups, "\x01"))
	keys := make([]string, 0, len(imp.Extra))
	for k := range imp.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString("\x00" + k + "=" + strings.Join(imp.Extra[k], "\x01"))
	}
	return b.String()
}
