package sdk

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestAnEventDecodesItsObjectOnlyWhenAsked: a function that only acks (a
// tick, say) does not pay for decoding the object.
func TestAnEventDecodesItsObjectOnlyWhenAsked(t *testing.T) {
	d := &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_TICK,
		Object: []byte(`{"metadata":{"name":"w","labels":{"a":"1"}}}`)}
	ev, err := newEvent(d, Tick, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev.object.u != nil {
		t.Fatal("the object was decoded before it was asked for")
	}
	obj := ev.Object()
	if obj.GetName() != "w" || obj.GetLabels()["a"] != "1" {
		t.Errorf("object %v", obj.Object)
	}
	if ev.Object() != obj {
		t.Error("a second Object() decoded again")
	}
	if ev.Old() != nil {
		t.Errorf("a tick has an old side: %v", ev.Old())
	}
	if string(ev.RawObject()) != string(d.Object) {
		t.Errorf("raw object %s", ev.RawObject())
	}
}

func TestPatchesComposeLikeSuccessiveMergePatches(t *testing.T) {
	tests := []struct {
		name     string
		dst, src map[string]any
		want     map[string]any
	}{
		{name: "into nothing", src: map[string]any{"a": 1}, want: map[string]any{"a": 1}},
		{name: "objects merge key by key",
			dst:  map[string]any{"spec": map[string]any{"a": 1, "b": 2}},
			src:  map[string]any{"spec": map[string]any{"b": 3, "c": 4}},
			want: map[string]any{"spec": map[string]any{"a": 1, "b": 3, "c": 4}}},
		{name: "null is kept so it still deletes",
			dst:  map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": "1"}}},
			src:  map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": nil}}},
			want: map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": nil}}}},
		{name: "scalars and lists replace",
			dst:  map[string]any{"x": map[string]any{"y": 1}, "l": []any{1, 2}},
			src:  map[string]any{"x": "flat", "l": []any{3}},
			want: map[string]any{"x": "flat", "l": []any{3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mergeInto(tt.dst, tt.src); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("mergeInto = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPatchDoesNotAliasTheCallersMaps(t *testing.T) {
	ev := &Event{}
	spec := map[string]any{"list": []any{"a"}}
	ev.Patch(map[string]any{"spec": spec})
	spec["late"] = true
	spec["list"].([]any)[0] = "changed"
	want := map[string]any{"spec": map[string]any{"list": []any{"a"}}}
	if !reflect.DeepEqual(ev.patch, want) {
		t.Errorf("patch = %v, want %v", ev.patch, want)
	}
}

func TestReconnectBackoffGrowsWithJitterAndResets(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: time.Second}
	steps := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for round := range 2 {
		for i, step := range steps {
			step *= time.Millisecond
			if d := b.next(); d < step/2 || d > step {
				t.Fatalf("round %d delay %d = %s, want within [%s, %s]", round, i, d, step/2, step)
			}
		}
		b.reset()
	}
}

func TestTruncateKeepsValidUTF8(t *testing.T) {
	for _, s := range []string{"short", strings.Repeat("x", 5000), strings.Repeat("日本", 1000)} {
		got := truncate(s)
		if len(got) > maxAckMessage || !utf8.ValidString(got) {
			t.Errorf("truncate(%d bytes) = %d bytes, valid UTF-8 %v", len(s), len(got), utf8.ValidString(got))
		}
		if len(s) <= maxAckMessage && got != s {
			t.Errorf("truncate changed a short message: %q", got)
		}
	}
}

func TestBearerTokenReadsTheFileEachTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	creds := bearerToken{files: []string{path}}
	for _, tok := range []string{"one", "two"} {
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		md, err := creds.GetRequestMetadata(context.Background())
		if err != nil || md["authorization"] != "Bearer "+tok {
			t.Fatalf("metadata = %v, %v; want Bearer %s", md, err, tok)
		}
	}
	if err := os.WriteFile(path, []byte("  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := creds.GetRequestMetadata(context.Background()); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty token file: err = %v, want an error", err)
	}
	if !creds.RequireTransportSecurity() {
		t.Error("a bearer token must require transport security")
	}
}

// The default token is the first file that exists, looked for again at
// each connection: a projected token for the broker's audience where the
// manifests mount one, else the Pod's ServiceAccount token.
func TestTheDefaultTokenIsTheBrokersAudienceWhereMounted(t *testing.T) {
	dir := t.TempDir()
	broker, service := filepath.Join(dir, "tether.dev-token"), filepath.Join(dir, "serviceaccount-token")
	if err := os.WriteFile(service, []byte("service\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := bearerToken{files: []string{broker, service}}
	md, err := creds.GetRequestMetadata(context.Background())
	if err != nil || md["authorization"] != "Bearer service" {
		t.Fatalf("no broker token mounted: metadata %v, %v; want the ServiceAccount token", md, err)
	}
	if err := os.WriteFile(broker, []byte("broker\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	md, err = creds.GetRequestMetadata(context.Background())
	if err != nil || md["authorization"] != "Bearer broker" {
		t.Fatalf("broker token mounted: metadata %v, %v; want it", md, err)
	}
	if _, err := (bearerToken{files: []string{broker + "-missing", service + "-missing"}}).GetRequestMetadata(context.Background()); err == nil {
		t.Error("neither file exists: no error")
	}
}

func TestNamesAreReadable(t *testing.T) {
	tests := []struct{ got, want string }{
		{GVR("apps", "v1", "deployments").String(), "apps/v1/deployments"},
		{GVK("", "v1", "Secret").String(), "v1/Secret"},
		{Watch.String(), "watch"},
		{Watch.bindingName(), "event"},
		{FinalizerStrict.String(), "STRICT"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestDefaultsNeedNoOptions(t *testing.T) {
	h := New("secret-ttl")
	if h.cfg.window != DefaultWindow || h.cfg.drainTimeout != DefaultDrainTimeout ||
		h.cfg.backoffMin != DefaultReconnectMin || h.cfg.backoffMax != DefaultReconnectMax {
		t.Errorf("defaults = %+v", h.cfg)
	}
	if !slices.Equal(h.cfg.tokenFiles, DefaultTokenPaths) || h.cfg.logger.Name() != "tether-sdk" {
		t.Errorf("token files %q, logger %q", h.cfg.tokenFiles, h.cfg.logger.Name())
	}
	if parts := strings.Split(h.InstanceID(), "-"); len(parts) < 3 {
		t.Errorf("instance id %q, want host-pid-random", h.InstanceID())
	}
}
