package progress

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("decoding %s: %v", s, err)
	}
	return m
}

func js(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestKeys(t *testing.T) {
	if got := LastHandledKey("secret-ttl"); got != "secret-ttl.tether.dev/last-handled" {
		t.Errorf("LastHandledKey = %q", got)
	}
	if got := ResultKey("secret-ttl", "on-create"); got != "secret-ttl.tether.dev/result.on-create" {
		t.Errorf("ResultKey = %q", got)
	}
	for _, k := range []string{LastHandledKey("h"), ResultKey("h", "b")} {
		if !Ours(k) {
			t.Errorf("Ours(%q) = false for a key of our own", k)
		}
	}
}

func TestOurs(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"tether.dev/x", false},
		{"h.tether.dev/last-handled", true},
		{"h.tether.dev/result.create", true},
		{"a.b.tether.dev/result.x", true},
		{"replicator.tether.dev/enabled", false}, // a handler's own interface
		{"h.tether.dev/last-handled-not", false},
		{"tether.dev", false},
		{"nottether.dev/x", false},
		{"tether.dev.example.com/x", false},
		{"example.com/tether.dev", false},
		{"app", false},
	}
	for _, tt := range tests {
		if got := Ours(tt.key); got != tt.want {
			t.Errorf("Ours(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

func TestEssenceKeepsOnlyWhatAnUpdateIs(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "drops apiVersion, kind, status and metadata but labels and annotations",
			in: `{"apiVersion":"v1","kind":"ConfigMap","status":{"phase":"x"},
				"metadata":{"name":"n","namespace":"ns","uid":"u","resourceVersion":"5","generation":2,
					"finalizers":["f"],"managedFields":[{}],"labels":{"app":"web"},"annotations":{"note":"hi"}},
				"spec":{"replicas":3},"data":{"k":"v"}}`,
			want: `{"data":{"k":"v"},"metadata":{"annotations":{"note":"hi"},"labels":{"app":"web"}},"spec":{"replicas":3}}`,
		},
		{
			name: "drops Tether's own annotations and kubectl's last-applied",
			in: `{"metadata":{"annotations":{
				"h.tether.dev/last-handled":"{}","other.tether.dev/result.b":"1",
				"kubectl.kubernetes.io/last-applied-configuration":"{...}","keep.example.com/a":"b"}}}`,
			want: `{"metadata":{"annotations":{"keep.example.com/a":"b"}}}`,
		},
		{
			name: "no metadata when nothing of it is kept",
			in:   `{"metadata":{"name":"n","labels":{},"annotations":{"h.tether.dev/last-handled":"{}"}},"spec":{}}`,
			want: `{"spec":{}}`,
		},
		{
			name: "an object without metadata",
			in:   `{"spec":{"a":1}}`,
			want: `{"spec":{"a":1}}`,
		},
		{
			name: "nothing at all",
			in:   `{"kind":"X","status":{}}`,
			want: `{}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := obj(t, tt.in)
			before := js(t, in)
			got := Essence(in)
			if js(t, got) != js(t, obj(t, tt.want)) {
				t.Errorf("got %s\nwant %s", js(t, got), tt.want)
			}
			if js(t, in) != before {
				t.Error("Essence changed its input")
			}
		})
	}
}

func TestEssenceIgnoresBookkeepingChanges(t *testing.T) {
	a := obj(t, `{"metadata":{"resourceVersion":"1","labels":{"app":"web"}},"spec":{"x":1},"status":{"s":1}}`)
	b := obj(t, `{"metadata":{"resourceVersion":"2","labels":{"app":"web"},
		"annotations":{"h.tether.dev/last-handled":"{}"}},"spec":{"x":1},"status":{"s":2}}`)
	if !Equal(Essence(a), Essence(b)) {
		t.Errorf("essences differ: %s vs %s", js(t, Essence(a)), js(t, Essence(b)))
	}
}

func TestLastHandledRoundTripsThroughEncode(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "n", "labels": map[string]any{"app": "web"}},
		"spec":     map[string]any{"replicas": int64(3), "ok": true, "list": []any{"a", int64(1)}},
	}}
	essence := Essence(u.Object)
	enc, err := Encode(essence)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := Encode(essence); again != enc {
		t.Errorf("Encode is not stable: %s vs %s", enc, again)
	}

	if _, ok, err := LastHandled(u, "h"); ok || err != nil {
		t.Fatalf("LastHandled before any record: ok=%v err=%v", ok, err)
	}
	u.SetAnnotations(map[string]string{LastHandledKey("h"): enc})
	got, ok, err := LastHandled(u, "h")
	if !ok || err != nil {
		t.Fatalf("LastHandled: ok=%v err=%v", ok, err)
	}
	if !Equal(got, essence) {
		t.Errorf("round trip: got %s, want %s", js(t, got), js(t, essence))
	}
	// The record itself is not part of the essence.
	if !Equal(Essence(u.Object), essence) {
		t.Errorf("the record changed the essence: %s", js(t, Essence(u.Object)))
	}
	if _, ok, _ := LastHandled(u, "other"); ok {
		t.Error("another handler sees this handler's record")
	}
}

func TestLastHandledReadsBadAndNullRecords(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    map[string]any
		wantErr bool
	}{
		{"null is an empty essence", "null", map[string]any{}, false},
		{"empty object", "{}", map[string]any{}, false},
		{"malformed", "{", nil, true},
		{"not an object", "[1]", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{}}
			u.SetAnnotations(map[string]string{LastHandledKey("h"): tt.value})
			got, ok, err := LastHandled(u, "h")
			if !ok {
				t.Error("ok = false for a present record")
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), LastHandledKey("h")) {
				t.Errorf("error %q does not name the annotation", err)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestEqualTreatsInt64AndFloat64Alike(t *testing.T) {
	tests := []struct {
		name string
		a, b map[string]any
		want bool
	}{
		{"int64 and float64", map[string]any{"n": int64(3)}, map[string]any{"n": float64(3)}, true},
		{"int and float64 nested", map[string]any{"m": map[string]any{"n": 3}}, map[string]any{"m": map[string]any{"n": 3.0}}, true},
		{"in lists", map[string]any{"l": []any{int64(1), "a"}}, map[string]any{"l": []any{1.0, "a"}}, true},
		{"different numbers", map[string]any{"n": int64(3)}, map[string]any{"n": 3.5}, false},
		{"string and number", map[string]any{"n": "3"}, map[string]any{"n": 3}, false},
		{"extra key", map[string]any{"n": 1}, map[string]any{"n": 1, "m": 2}, false},
		{"list order", map[string]any{"l": []any{1, 2}}, map[string]any{"l": []any{2, 1}}, false},
		{"both empty", map[string]any{}, map[string]any{}, true},
	}
	for _, tt := range tests {
		if got := Equal(tt.a, tt.b); got != tt.want {
			t.Errorf("%s: Equal = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     []Entry
	}{
		{
			name: "no change",
			old:  `{"spec":{"a":1,"l":[1,2]}}`,
			new:  `{"spec":{"a":1,"l":[1,2]}}`,
		},
		{
			name: "add, change and remove, sorted by path",
			old:  `{"spec":{"b":1,"c":{"d":1}},"z":1,"metadata":{"labels":{"app":"web"}}}`,
			new:  `{"spec":{"a":2,"b":3,"c":{"d":1,"e":{"f":1}}},"metadata":{"labels":{"app":"api"}}}`,
			want: []Entry{
				{Op: Change, Path: []string{"metadata", "labels", "app"}, Old: "web", New: "api"},
				{Op: Add, Path: []string{"spec", "a"}, New: 2.0},
				{Op: Change, Path: []string{"spec", "b"}, Old: 1.0, New: 3.0},
				{Op: Add, Path: []string{"spec", "c", "e"}, New: map[string]any{"f": 1.0}},
				{Op: Remove, Path: []string{"z"}, Old: 1.0},
			},
		},
		{
			name: "lists are compared whole",
			old:  `{"spec":{"l":[1,{"a":1}]}}`,
			new:  `{"spec":{"l":[1,{"a":2}]}}`,
			want: []Entry{
				{Op: Change, Path: []string{"spec", "l"}, Old: []any{1.0, map[string]any{"a": 1.0}}, New: []any{1.0, map[string]any{"a": 2.0}}},
			},
		},
		{
			name: "a map replaced by a scalar is one change",
			old:  `{"spec":{"a":1}}`,
			new:  `{"spec":"x"}`,
			want: []Entry{{Op: Change, Path: []string{"spec"}, Old: map[string]any{"a": 1.0}, New: "x"}},
		},
		{
			name: "a removed map is one entry",
			old:  `{"spec":{"a":{"b":1}}}`,
			new:  `{"spec":{}}`,
			want: []Entry{{Op: Remove, Path: []string{"spec", "a"}, Old: map[string]any{"b": 1.0}}},
		},
		{
			name: "null to a value is a change",
			old:  `{"a":null}`,
			new:  `{"a":1}`,
			want: []Entry{{Op: Change, Path: []string{"a"}, Old: nil, New: 1.0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Diff(obj(t, tt.old), obj(t, tt.new))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDiffTreatsInt64AndFloat64Alike(t *testing.T) {
	old := map[string]any{"spec": map[string]any{"n": int64(3), "m": int64(1)}}
	new := map[string]any{"spec": map[string]any{"n": 3.0, "m": 2.0}}
	want := []Entry{{Op: Change, Path: []string{"spec", "m"}, Old: 1.0, New: 2.0}}
	if got := Diff(old, new); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestDiffPathsAreSorted(t *testing.T) {
	old := obj(t, `{"b":{"x":1,"a":1},"a":{"z":1},"ab":1,"c":1}`)
	new := obj(t, `{"b":{"x":2,"a":2},"a":{"z":2},"ab":2,"c":2}`)
	got := Diff(old, new)
	if len(got) != 5 {
		t.Fatalf("got %d entries: %+v", len(got), got)
	}
	if !slices.IsSortedFunc(got, func(x, y Entry) int { return slices.Compare(x.Path, y.Path) }) {
		t.Errorf("paths not sorted: %+v", got)
	}
}

func TestField(t *testing.T) {
	o := obj(t, `{"spec":{"replicas":3,"tpl":{"name":"x"},"nil":null},"list":[1]}`)
	tests := []struct {
		path   []string
		want   any
		wantOK bool
	}{
		{[]string{"spec", "replicas"}, 3.0, true},
		{[]string{"spec", "tpl", "name"}, "x", true},
		{[]string{"spec", "tpl"}, map[string]any{"name": "x"}, true},
		{[]string{"spec", "nil"}, nil, true},
		{[]string{"spec", "missing"}, nil, false},
		{[]string{"spec", "replicas", "deeper"}, nil, false},
		{[]string{"list", "0"}, nil, false},
		{[]string{"nope", "x"}, nil, false},
	}
	for _, tt := range tests {
		got, ok := Field(o, tt.path)
		if ok != tt.wantOK || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Field(%q) = %v, %v; want %v, %v", tt.path, got, ok, tt.want, tt.wantOK)
		}
	}
	if _, ok := Field(nil, []string{"a"}); ok {
		t.Error("Field(nil) found something")
	}
}

func TestTouches(t *testing.T) {
	path := []string{"spec", "replicas"}
	tests := []struct {
		name  string
		entry []string
		want  bool
	}{
		{"the path itself", []string{"spec", "replicas"}, true},
		{"a child", []string{"spec", "replicas", "min"}, true},
		{"a replaced parent", []string{"spec"}, true},
		{"the whole object", []string{}, true},
		{"a sibling", []string{"spec", "paused"}, false},
		{"a sibling's child", []string{"spec", "template", "replicas"}, false},
		{"a sibling with a common prefix", []string{"spec", "replicasMax"}, false},
		{"elsewhere", []string{"metadata", "labels", "replicas"}, false},
	}
	for _, tt := range tests {
		entries := []Entry{{Op: Change, Path: tt.entry}}
		if got := Touches(entries, path); got != tt.want {
			t.Errorf("%s: Touches = %v, want %v", tt.name, got, tt.want)
		}
	}
	if Touches(nil, path) {
		t.Error("no entries touch something")
	}
	mixed := []Entry{{Op: Add, Path: []string{"data"}}, {Op: Remove, Path: []string{"spec", "replicas"}}}
	if !Touches(mixed, path) {
		t.Error("a later entry is not considered")
	}
}

func TestTouchesOnARealDiff(t *testing.T) {
	old := obj(t, `{"spec":{"replicas":1,"paused":false}}`)
	tests := []struct {
		name, new string
		want      bool
	}{
		{"replicas changed", `{"spec":{"replicas":2,"paused":false}}`, true},
		{"replicas removed", `{"spec":{"paused":false}}`, true},
		{"sibling changed", `{"spec":{"replicas":1,"paused":true}}`, false},
		{"spec replaced", `{"spec":"none"}`, true},
		{"unchanged", `{"spec":{"replicas":1,"paused":false}}`, false},
	}
	for _, tt := range tests {
		if got := Touches(Diff(old, obj(t, tt.new)), []string{"spec", "replicas"}); got != tt.want {
			t.Errorf("%s: Touches = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestSecretValuesAreNeverRecorded(t *testing.T) {
	secret := map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s"},
		"data":     map[string]any{"password": "aHVudGVyMg=="},
	}
	enc, err := Encode(Essence(secret))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(enc, "aHVudGVyMg==") {
		t.Fatalf("the last-handled state carries the secret value: %s", enc)
	}
	changed := map[string]any{"apiVersion": "v1", "kind": "Secret", "data": map[string]any{"password": "b3RoZXI="}}
	d := Diff(Essence(secret), Essence(changed))
	if len(d) != 1 || strings.Join(d[0].Path, ".") != "data.password" {
		t.Errorf("a changed value shows as a change of its key: %+v", d)
	}
}

func TestLargeEssenceIsRecordedAsDigest(t *testing.T) {
	big := map[string]any{"spec": map[string]any{"blob": strings.Repeat("x", MaxRecorded+1)}}
	enc, err := Encode(Essence(big))
	if err != nil {
		t.Fatal(err)
	}
	if len(enc) > 200 {
		t.Fatalf("a large essence is recorded whole (%d bytes)", len(enc))
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(enc), &rec); err != nil {
		t.Fatal(err)
	}
	if !Digested(rec) || !Equal(rec, Essence(big)) {
		t.Errorf("the digest does not match its own essence: %s", enc)
	}
	other := map[string]any{"spec": map[string]any{"blob": strings.Repeat("y", MaxRecorded+1)}}
	if Equal(rec, Essence(other)) || !Equal(Recorded(Essence(big)), Essence(big)) {
		t.Error("digests do not tell changed from unchanged")
	}
}
