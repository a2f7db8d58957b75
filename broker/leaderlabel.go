package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tether-dev/tether/broker/kube"
)

// LeaderLabel marks the Pod of the replica that leads, once it has synced:
// the broker's Service selects it, so that handlers and the API server's
// webhook calls reach the leader. Readiness says only that a replica
// serves, so a rollout, `kubectl rollout status` and a drain work as for
// any Deployment; a readiness that only the leader passed made a rolling
// update with maxUnavailable 0 wait forever for a second ready replica.
const LeaderLabel = "tether.dev/leader"

// leaderLabelPatch sets LeaderLabel to "true" (leading) or removes it. A
// merge patch of one label changes nothing else on the Pod.
func leaderLabelPatch(leading bool) []byte {
	var value any // null removes the label
	if leading {
		value = "true"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LeaderLabel: value}}})
	return patch
}

// labelOwnPod puts LeaderLabel on the broker's own Pod (leading) or takes
// it off, retrying with backoff until it is done, the Pod is gone, or ctx
// ends.
func labelOwnPod(ctx context.Context, kube kube.Interface, namespace, pod string, leading bool, log hclog.Logger) error {
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 20, Cap: 5 * time.Second}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Pods(namespace).Patch(ctx, pod, types.MergePatchType, leaderLabelPatch(leading), metav1.PatchOptions{})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return true, nil
		case ctx.Err() != nil:
			return false, ctx.Err()
		}
		log.Warn("cannot label the broker's Pod; retrying", "pod", pod, "leader", leading, "error", err)
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("labelling pod %s/%s %s=%t: %w", namespace, pod, LeaderLabel, leading, err)
	}
	return nil
}

// unlabelOwnPod takes LeaderLabel off the broker's own Pod, when it has one,
// within a bound: a broker that cannot reach the API server must still stop
// or start. Kubelet's readiness probe keeps a dead replica out of the
// Service either way.
func (p *parts) unlabelOwnPod() {
	pod := p.opts.LeaderElection.Pod
	if pod == "" || !p.opts.LeaderElection.Enabled {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := labelOwnPod(ctx, p.kube, p.opts.Namespace, pod, false, p.log); err != nil {
		p.log.Warn("cannot take the leader label off this Pod", "error", err)
	}
}
