package main

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tether-dev/tether/sdk"
)

func TestParseTTL(t *testing.T) {
	for in, want := range map[string]time.Duration{"3s": 3 * time.Second, "1h30m": 90 * time.Minute, "0s": 0} {
		if got, err := parseTTL(in); err != nil || got != want {
			t.Errorf("parseTTL(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "3", "-1s", "1d"} {
		if _, err := parseTTL(in); err == nil {
			t.Errorf("parseTTL(%q) accepted", in)
		}
	}
}

func TestExpired(t *testing.T) {
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		ttl  time.Duration
		now  time.Time
		want bool
	}{
		{time.Minute, created.Add(59 * time.Second), false},
		{time.Minute, created.Add(time.Minute), true},
		{time.Minute, created.Add(time.Hour), true},
		{0, created, true},
		{time.Hour, created.Add(-time.Minute), false}, // clock skew: not yet
	} {
		if got := expired(created, tc.ttl, tc.now); got != tc.want {
			t.Errorf("expired(ttl %v, %v after creation) = %v, want %v", tc.ttl, tc.now.Sub(created), got, tc.want)
		}
	}
}

func ttlSecret(ttl string, created time.Time) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "namespace": "ns", "uid": "u1",
			"annotations": map[string]any{annTTL: ttl}},
	}}
	u.SetCreationTimestamp(metav1.NewTime(created))
	return u
}

func TestTickDeletesOnlyExpiredSecrets(t *testing.T) {
	ctx := context.Background()
	created := time.Now().Add(-10 * time.Second)
	for _, tc := range []struct {
		ttl     string
		deleted bool
	}{{"5s", true}, {"1h", false}} {
		obj := ttlSecret(tc.ttl, created)
		_, dyn := fakeReplicator(nil, obj.DeepCopy())
		r := &reaper{dyn: dyn, now: time.Now}
		if err := r.tick(ctx, sdk.NewEvent(sdk.Tick, obj)); err != nil {
			t.Fatalf("ttl %s: %v", tc.ttl, err)
		}
		_, err := dyn.Resource(secretsGVR).Namespace("ns").Get(ctx, "s", metav1.GetOptions{})
		if gone := err != nil; gone != tc.deleted {
			t.Errorf("ttl %s, 10s old: deleted = %v, want %v", tc.ttl, gone, tc.deleted)
		}
	}
}

func TestTickFailsPermanentlyOnABadTTL(t *testing.T) {
	r := &reaper{dyn: nil, now: time.Now}
	err := r.tick(context.Background(), sdk.NewEvent(sdk.Tick, ttlSecret("soon", time.Now())))
	var perm *sdk.PermanentError
	if !errors.As(err, &perm) {
		t.Fatalf("tick with ttl %q = %v, want a permanent error", "soon", err)
	}
}

func TestTickToleratesASecretAlreadyGone(t *testing.T) {
	_, dyn := fakeReplicator(nil, []runtime.Object{}...)
	r := &reaper{dyn: dyn, now: time.Now}
	obj := ttlSecret("1s", time.Now().Add(-time.Minute))
	if err := r.tick(context.Background(), sdk.NewEvent(sdk.Tick, obj)); err != nil {
		t.Errorf("tick on a Secret already gone: %v", err)
	}
}
