package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// links are the network paths of the run that faults can hit, each a
// toxiproxy proxy in this process: every broker's path to the API server,
// and the handlers' path to every broker.
type links struct {
	server  *toxiproxy.ApiServer
	proxies map[string]*toxiproxy.Proxy
	seq     atomic.Uint64
}

func newLinks() *links {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	return &links{server: srv, proxies: map[string]*toxiproxy.Proxy{}}
}

// add starts a proxy named name to upstream, in place of any of that name,
// and returns the address it listens on.
func (l *links) add(name, upstream string) (string, error) {
	if old := l.proxies[name]; old != nil {
		old.Stop()
	}
	p := toxiproxy.NewProxy(l.server, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return "", fmt.Errorf("starting the proxy %s: %w", name, err)
	}
	l.proxies[name] = p
	return p.Listen, nil
}

func (l *links) names() []string {
	out := make([]string, 0, len(l.proxies))
	for n := range l.proxies {
		out = append(out, n)
	}
	return out
}

// toxic adds a toxic to both directions of link and returns a function
// that removes it again.
func (l *links) toxic(link, typ string, attributes string) (heal func(), err error) {
	p := l.proxies[link]
	if p == nil {
		return nil, fmt.Errorf("no link %q", link)
	}
	var names []string
	for _, stream := range []string{"downstream", "upstream"} {
		name := fmt.Sprintf("%s-%s-%d", typ, stream, l.seq.Add(1))
		body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"attributes":%s}`, name, typ, stream, attributes)
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			for _, n := range names {
				_ = p.Toxics.RemoveToxic(context.Background(), n)
			}
			return nil, fmt.Errorf("adding a %s toxic to %s: %w", typ, link, err)
		}
		names = append(names, name)
	}
	return func() {
		for _, n := range names {
			_ = p.Toxics.RemoveToxic(context.Background(), n)
		}
	}, nil
}

// cut stops link's proxy, which closes every connection through it and
// refuses new ones, and returns a function that starts it again on the
// same address.
func (l *links) cut(link string) (heal func() error, err error) {
	p := l.proxies[link]
	if p == nil {
		return nil, fmt.Errorf("no link %q", link)
	}
	p.Stop()
	return func() error {
		if err := p.Start(); err != nil {
			return fmt.Errorf("opening %s again at %s: %w", link, p.Listen, err)
		}
		return nil
	}, nil
}

func (l *links) stop() {
	for _, p := range l.proxies {
		p.Stop()
	}
}
