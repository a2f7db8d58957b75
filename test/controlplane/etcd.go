package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// startEtcd starts etcd on the control plane's data folder and peer URL,
// serving clients at clientURL, and waits until it reports healthy (a
// leader elected and a read answered). When that fails it stops it again.
func (cp *ControlPlane) startEtcd(ctx context.Context, clientURL string) (*Process, error) {
	tail := newTailBuffer(8 << 10)
	p, err := cp.run(cp.opts, "etcd", tail, cp.opts.Binaries.Etcd,
		"--data-dir", cp.path("etcd"),
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", cp.peerURL,
		"--initial-advertise-peer-urls", cp.peerURL,
		"--initial-cluster", "default="+cp.peerURL,
		"--unsafe-no-fsync",
		"--log-level", "warn",
	)
	if err != nil {
		return nil, err
	}
	httpClient := &http.Client{Timeout: 2 * time.Second}
	defer httpClient.CloseIdleConnections()
	if err := waitUntil(ctx, p, tail, func(ctx context.Context) error {
		return probe(ctx, httpClient, clientURL+"/health", "", `"health":"true"`)
	}); err != nil {
		_ = p.Stop(cp.stopGrace)
		return nil, fmt.Errorf("waiting for etcd at %s: %w", clientURL, err)
	}
	return p, nil
}

// RestartEtcd stops etcd (SIGTERM, then SIGKILL after the stop timeout, as a
// crash) and starts it again on the same ports and data folder, as a crashed
// etcd member comes back. kube-apiserver stays up; meanwhile its requests
// fail or wait, and it reports unready. Its etcd client reconnects by itself
// and resumes each watch from the revision after the last it saw, so the
// watch caches go on where they were, and the API server's own watchers
// stall but are not ended: nobody has to relist. RestartEtcd returns once
// etcd is healthy and the API server reports ready again, about 10 s later:
// on SIGTERM etcd waits for its open watch streams for its request timeout
// (7 s) before it exits.
func (cp *ControlPlane) RestartEtcd(ctx context.Context) error {
	begin := time.Now()
	cp.mu.Lock()
	p := cp.etcd
	cp.mu.Unlock()
	if err := cp.stopToRestart(p, "etcd"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cp.opts.StartTimeout)
	defer cancel()
	q, err := cp.startEtcd(ctx, cp.etcdURL)
	if err != nil {
		return fmt.Errorf("restarting etcd: %w", err)
	}
	cp.mu.Lock()
	if cp.etcd != p || cp.apiserver == nil {
		cp.mu.Unlock()
		_ = q.Stop(cp.stopGrace)
		return errors.New("restarting etcd: the control plane was stopped meanwhile")
	}
	cp.etcd = q
	api, tail := cp.apiserver, cp.apiTail
	cp.mu.Unlock()
	if err := cp.awaitAPIServer(ctx, api, tail); err != nil {
		return fmt.Errorf("restarting etcd: %w", err)
	}
	cp.log.Info("etcd restarted", "url", cp.etcdURL, "took", time.Since(begin).Round(time.Millisecond))
	return nil
}

// Compact compacts etcd at its current revision and returns that revision
// once the compaction is physically applied: etcd keeps no older version of
// any key. kube-apiserver is not told (compact_rev_key is left alone; its
// own compactor goes on every 5 minutes).
//
// What etcd serves from an older revision is then answered 410 Gone: a
// watch on a resource without a watch cache (Events) resumed from before,
// or a list continued with a token from before. A watch of a resource with
// a watch cache is not: the API server serves it from the cache, whose
// events reach back past the compaction, and its own watch on etcd goes on
// untouched by it. To make those relist, see [ControlPlane.CompactAhead].
func (cp *ControlPlane) Compact(ctx context.Context) (int64, error) {
	if err := cp.running(); err != nil {
		return 0, fmt.Errorf("compacting etcd: %w", err)
	}
	rev, err := compact(ctx, cp.etcdURL)
	if err != nil {
		return 0, err
	}
	cp.log.Info("etcd compacted", "revision", rev)
	return rev, nil
}

// CompactAhead writes twice to etcd (a key outside /registry, which the API
// server never reads) and compacts at the second write, so that the
// compaction is past every revision a watch on etcd has seen: such a watch
// resumes from the revision after the last it saw (an event or a progress
// notification), at most the last revision written before plus one, and
// the two writes put the compaction past that whichever resource was
// written last. A compaction at the last revision alone would spare the
// watch of that resource. It returns the compacted revision.
//
// It is meant for while kube-apiserver is cut off from etcd (through a
// proxy of Options.EtcdVia), as an API server is while another one writes
// and compacts: when its connection comes back, every etcd watch it had is
// answered "compacted"; each watch cache then lists again and ends its
// watchers, and a client's watch resumed from a resource version of before
// is answered 410 Gone: the client relists. That comes a moment after the
// API server reconnects (a watch cache lists again about a second after
// its watch failed); [AwaitWatchExpired] waits for it. A write by anyone
// else between the two, or after them, would spare its resource: the
// writes are repeated until nothing came between or after them.
func (cp *ControlPlane) CompactAhead(ctx context.Context) (int64, error) {
	if err := cp.running(); err != nil {
		return 0, fmt.Errorf("compacting etcd: %w", err)
	}
	for range 5 {
		var revs [2]int64
		for i := range revs {
			body := map[string][]byte{"key": []byte(markerKey), "value": []byte(strconv.Itoa(i))}
			rev, err := etcdPost(ctx, cp.etcdURL, "/v3/kv/put", body)
			if err != nil {
				return 0, fmt.Errorf("writing to etcd: %w", err)
			}
			revs[i] = rev
		}
		rev, err := compact(ctx, cp.etcdURL)
		if err != nil {
			return 0, err
		}
		after, err := revision(ctx, cp.etcdURL)
		if err != nil {
			return 0, err
		}
		if revs[1] == revs[0]+1 && rev == revs[1] && after == rev {
			cp.log.Info("etcd compacted ahead", "revision", rev)
			return rev, nil
		}
	}
	return 0, errors.New("compacting etcd ahead: others kept writing; is kube-apiserver cut off from etcd?")
}

// markerKey is the key CompactAhead writes.
const markerKey = "tether-controlplane/compaction-marker"

// running says whether etcd runs, as far as the harness knows.
func (cp *ControlPlane) running() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.etcd == nil {
		return errors.New("the control plane is stopped")
	}
	return nil
}

// compact compacts the etcd at url at its current revision, physically.
func compact(ctx context.Context, url string) (int64, error) {
	rev, err := revision(ctx, url)
	if err != nil {
		return 0, err
	}
	_, err = etcdPost(ctx, url, "/v3/kv/compaction", compactionRequest{Revision: rev, Physical: true})
	if err != nil && !strings.Contains(err.Error(), "required revision has been compacted") {
		return 0, fmt.Errorf("compacting etcd at revision %d: %w", rev, err)
	}
	// Already compacted there: nothing was written since the last one.
	return rev, nil
}

// revision is the current revision of the etcd at url.
func revision(ctx context.Context, url string) (int64, error) {
	// Any key: the header carries the store's revision.
	rev, err := etcdPost(ctx, url, "/v3/kv/range", map[string]any{"key": []byte(markerKey), "count_only": true})
	if err != nil {
		return 0, fmt.Errorf("reading etcd's revision: %w", err)
	}
	return rev, nil
}

// compactionRequest is etcdserverpb.CompactionRequest as etcd's gRPC
// gateway reads it (protojson: an int64 is a JSON string).
type compactionRequest struct {
	Revision int64 `json:"revision,string"`
	Physical bool  `json:"physical"`
}

// etcdPost sends one request to etcd's gRPC gateway, the JSON mapping of
// its v3 API that it serves on its client URL (protojson with the proto
// field names: bytes in base64, an int64 as a string), and returns the
// revision in the answer's header.
func etcdPost(ctx context.Context, url, path string, request any) (int64, error) {
	body, err := json.Marshal(request)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := etcdClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("POST %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST %s: %s: %s", path, resp.Status, bytes.TrimSpace(data))
	}
	var answer struct {
		Header struct {
			Revision int64 `json:"revision,string"`
		} `json:"header"`
	}
	if err := json.Unmarshal(data, &answer); err != nil {
		return 0, fmt.Errorf("POST %s: reading the answer %q: %w", path, data, err)
	}
	return answer.Header.Revision, nil
}

var etcdClient = &http.Client{Timeout: 30 * time.Second}

// AwaitWatchExpired waits until a watch that open starts from resource
// version rv is answered 410 Gone, or ctx ends: after
// [ControlPlane.CompactAhead], until the watch cache of its resource has
// listed again past rv. Until then the old cache serves such a watch; each
// attempt lasts at most a second.
func AwaitWatchExpired(ctx context.Context, rv string, open func(context.Context, metav1.ListOptions) (watch.Interface, error)) error {
	timeout := int64(1)
	var last error
	for ctx.Err() == nil {
		w, err := open(ctx, metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: &timeout})
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return nil
		}
		if err != nil {
			last = err
			select { // paced, not a busy loop while the API server refuses
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if status, ok := ev.Object.(*metav1.Status); ev.Type == watch.Error && ok && status.Code == http.StatusGone {
				w.Stop()
				return nil
			}
		}
		w.Stop()
	}
	return fmt.Errorf("a watch from resource version %s: no 410 Gone: %w (last error: %v)", rv, ctx.Err(), last)
}
