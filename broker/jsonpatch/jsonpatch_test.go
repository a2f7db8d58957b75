package jsonpatch

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	evanphx "gopkg.in/evanphx/json-patch.v4"
)

// obj decodes a JSON object, so test documents read like the wire form and
// numbers are float64 as the broker sees them in merge patches.
func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("decoding %s: %v", s, err)
	}
	return m
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encoding %v: %v", v, err)
	}
	return string(b)
}

// deepCopy copies a decoded JSON value through JSON.
func deepCopy(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	return obj(t, mustJSON(t, m))
}

// applyJSONPatch applies p to doc with the JSON-patch library the API server
// uses, and returns the result decoded.
func applyJSONPatch(t *testing.T, doc map[string]any, p Patch) (map[string]any, error) {
	t.Helper()
	data, err := p.JSON()
	if err != nil {
		t.Fatalf("encoding patch: %v", err)
	}
	decoded, err := evanphx.DecodePatch(data)
	if err != nil {
		t.Fatalf("library cannot decode our patch %s: %v", data, err)
	}
	out, err := decoded.Apply([]byte(mustJSON(t, doc)))
	if err != nil {
		return nil, err
	}
	return obj(t, string(out)), nil
}

// applyMergeLib applies a merge patch with the library, as a reference for
// RFC 7386.
func applyMergeLib(t *testing.T, doc, merge map[string]any) map[string]any {
	t.Helper()
	out, err := evanphx.MergePatch([]byte(mustJSON(t, doc)), []byte(mustJSON(t, merge)))
	if err != nil {
		t.Fatalf("library merge patch: %v", err)
	}
	return obj(t, string(out))
}

func TestFromMergePatchTouchesOnlyNamedMembers(t *testing.T) {
	current := `{
		"metadata": {
			"name": "x",
			"labels": {"app": "web", "tier": "front", "gone": "soon"},
			"annotations": {"other.io/keep": "1"}
		},
		"spec": {"replicas": 3, "list": [1, 2], "flag": true, "nothing": null},
		"data": "abc"
	}`
	tests := []struct {
		name        string
		current     string
		merge       string
		want        string // the patch as JSON
		wantCreated bool
	}{
		{
			name:  "a changed label is replaced and nothing else is named",
			merge: `{"metadata": {"labels": {"app": "api"}}}`,
			want:  `[{"op":"add","path":"/metadata/labels/app","value":"api"}]`,
		},
		{
			name:  "a new member of an existing map is added alone",
			merge: `{"metadata": {"annotations": {"mine.io/new": "v"}}}`,
			want:  `[{"op":"add","path":"/metadata/annotations/mine.io~1new","value":"v"}]`,
		},
		{
			name:  "nested maps recurse to the leaf",
			merge: `{"spec": {"replicas": 5}, "metadata": {"labels": {"tier": "back"}}}`,
			want:  `[{"op":"add","path":"/metadata/labels/tier","value":"back"},{"op":"add","path":"/spec/replicas","value":5}]`,
		},
		{
			name:  "null removes an existing key",
			merge: `{"metadata": {"labels": {"gone": null}}}`,
			want:  `[{"op":"remove","path":"/metadata/labels/gone"}]`,
		},
		{
			name:  "null removes an existing null member",
			merge: `{"spec": {"nothing": null}}`,
			want:  `[{"op":"remove","path":"/spec/nothing"}]`,
		},
		{
			name:  "null for a missing key is no op",
			merge: `{"metadata": {"labels": {"never": null}}, "absent": null}`,
			want:  `[]`,
		},
		{
			name:  "an unchanged scalar is no op even when one side is int64",
			merge: `{"spec": {"replicas": 3, "flag": true}, "data": "abc"}`,
			want:  `[]`,
		},
		{
			name:  "an unchanged list is no op",
			merge: `{"spec": {"list": [1, 2]}}`,
			want:  `[]`,
		},
		{
			name:  "a changed list is replaced whole",
			merge: `{"spec": {"list": [2]}}`,
			want:  `[{"op":"add","path":"/spec/list","value":[2]}]`,
		},
		{
			name:  "false is a real value",
			merge: `{"spec": {"flag": false}}`,
			want:  `[{"op":"add","path":"/spec/flag","value":false}]`,
		},
		{
			name:        "a missing parent map is added whole with nulls stripped",
			merge:       `{"status": {"phase": "Ready", "old": null, "cond": {"a": 1, "b": null}}}`,
			want:        `[{"op":"add","path":"/status","value":{"cond":{"a":1},"phase":"Ready"}}]`,
			wantCreated: true,
		},
		{
			name:        "a missing map is created even when the patch only removes from it",
			current:     `{"metadata": {"name": "x"}}`,
			merge:       `{"metadata": {"labels": {"gone": null}}}`,
			want:        `[{"op":"add","path":"/metadata/labels","value":{}}]`,
			wantCreated: true,
		},
		{
			name:        "a map over a null member is added whole and guarded",
			merge:       `{"spec": {"nothing": {"a": "b"}}}`,
			want:        `[{"op":"add","path":"/spec/nothing","value":{"a":"b"}}]`,
			wantCreated: true,
		},
		{
			name:        "a map over a scalar is added whole and guarded",
			merge:       `{"data": {"k": "v"}}`,
			want:        `[{"op":"add","path":"/data","value":{"k":"v"}}]`,
			wantCreated: true,
		},
		{
			name:  "a scalar over a map replaces it",
			merge: `{"spec": "flat"}`,
			want:  `[{"op":"add","path":"/spec","value":"flat"}]`,
		},
		{
			name:  "operations come in key order",
			merge: `{"z": 1, "a": 1, "m": {"y": 1, "b": 1}}`,
			want: `[{"op":"add","path":"/a","value":1},{"op":"add","path":"/m","value":{"b":1,"y":1}},` +
				`{"op":"add","path":"/z","value":1}]`,
			wantCreated: true,
		},
		{
			name:  "an empty merge patch is no op",
			merge: `{}`,
			want:  `[]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := current
			if tt.current != "" {
				src = tt.current
			}
			cur := obj(t, src)
			// Numbers read from the API server are int64.
			if spec, ok := cur["spec"].(map[string]any); ok {
				if _, ok := spec["replicas"]; ok {
					spec["replicas"] = int64(3)
				}
			}
			before := mustJSON(t, cur)
			merge := obj(t, tt.merge)
			ops, created, err := FromMergePatch(cur, merge)
			if err != nil {
				t.Fatalf("FromMergePatch: %v", err)
			}
			got, err := ops.JSON()
			if err != nil {
				t.Fatalf("JSON: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("patch\n got %s\nwant %s", got, tt.want)
			}
			if created != tt.wantCreated {
				t.Errorf("created = %v, want %v", created, tt.wantCreated)
			}
			if after := mustJSON(t, cur); after != before {
				t.Errorf("FromMergePatch changed current:\n%s\n%s", before, after)
			}
		})
	}
}

// TestFromMergePatchAppliesLikeMergePatch applies the generated JSON patch
// with the library the API server uses and checks that it has the effect of
// the merge patch.
func TestFromMergePatchAppliesLikeMergePatch(t *testing.T) {
	tests := []struct {
		name, current, merge string
	}{
		{"labels", `{"metadata":{"labels":{"a":"1","b":"2"}}}`, `{"metadata":{"labels":{"a":"x","b":null,"c":"3"}}}`},
		{"missing maps", `{"metadata":{"name":"n"}}`, `{"metadata":{"annotations":{"k":"v","d":null}},"status":{"s":{"t":1,"u":null}}}`},
		{"escaped keys", `{"metadata":{"annotations":{"a/b":"1","c~d":"2"}}}`, `{"metadata":{"annotations":{"a/b":null,"c~d":"3","e~/f":"4"}}}`},
		{"replace non-maps", `{"a":"s","b":null,"c":[1],"d":{"e":1}}`, `{"a":{"x":1},"b":{"y":null,"z":2},"c":{"w":3},"d":5}`},
		{"lists and scalars", `{"l":[1,2,3],"n":1,"f":true,"s":""}`, `{"l":[3],"n":2,"f":false,"s":"x"}`},
		{"nothing to do", `{"a":{"b":1}}`, `{"a":{"b":1,"c":null},"z":null}`},
		{"deep", `{"a":{"b":{"c":{"d":1,"e":2}}}}`, `{"a":{"b":{"c":{"d":null,"f":3}}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur, merge := obj(t, tt.current), obj(t, tt.merge)
			ops, _, err := FromMergePatch(cur, merge)
			if err != nil {
				t.Fatalf("FromMergePatch: %v", err)
			}
			got, err := applyJSONPatch(t, cur, ops)
			if err != nil {
				t.Fatalf("applying %v: %v", ops, err)
			}
			want := applyMergeLib(t, cur, merge)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("JSON patch result\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
			}
			if mine := ApplyMerge(cur, merge); !reflect.DeepEqual(deepCopy(t, mine), want) {
				t.Errorf("ApplyMerge\n got %s\nwant %s", mustJSON(t, mine), mustJSON(t, want))
			}
		})
	}
}

func TestFromMergePatchKeepsOtherWritersKeys(t *testing.T) {
	seen := obj(t, `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}}}`)
	ops, created, err := FromMergePatch(seen, obj(t, `{"metadata":{"labels":{"app":"api"},"annotations":{"a":null}}}`))
	if err != nil || created {
		t.Fatalf("FromMergePatch: created=%v err=%v", created, err)
	}
	// Another controller added a label and an annotation meanwhile.
	now := obj(t, `{"metadata":{"labels":{"app":"web","theirs":"x"},"annotations":{"a":"1","theirs":"y"}}}`)
	got, err := applyJSONPatch(t, now, ops)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	want := obj(t, `{"metadata":{"labels":{"app":"api","theirs":"x"},"annotations":{"theirs":"y"}}}`)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %s, want %s", mustJSON(t, got), mustJSON(t, want))
	}
}

// TestFromMergePatchGuardsCreatedMaps shows why created matters: the add of
// a whole map replaces one another writer created meanwhile, and the
// resourceVersion test the caller then adds refuses the write.
func TestFromMergePatchGuardsCreatedMaps(t *testing.T) {
	seen := obj(t, `{"metadata":{"name":"x","resourceVersion":"1"}}`)
	ops, created, err := FromMergePatch(seen, obj(t, `{"metadata":{"labels":{"mine":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatal("created = false for an added labels map")
	}
	now := obj(t, `{"metadata":{"name":"x","resourceVersion":"2","labels":{"theirs":"1"}}}`)

	unguarded, err := applyJSONPatch(t, now, ops)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if _, ok := unguarded["metadata"].(map[string]any)["labels"].(map[string]any)["theirs"]; ok {
		t.Fatal("expected the unguarded add to replace the other writer's map; the guard would be pointless")
	}

	var guarded Patch
	guarded.Test("/metadata/resourceVersion", "1")
	guarded = append(guarded, ops...)
	if _, err := applyJSONPatch(t, now, guarded); err == nil {
		t.Error("guarded patch applied to a newer object")
	}
	if _, err := applyJSONPatch(t, seen, guarded); err != nil {
		t.Errorf("guarded patch refused on the object it was made for: %v", err)
	}
}

func TestPointerEscapesTildeAndSlash(t *testing.T) {
	tests := []struct {
		segments []string
		want     string
	}{
		{nil, ""},
		{[]string{"metadata", "labels"}, "/metadata/labels"},
		{[]string{"metadata", "annotations", "example.com/key"}, "/metadata/annotations/example.com~1key"},
		{[]string{"a~b"}, "/a~0b"},
		{[]string{"~1"}, "/~01"},
		{[]string{"/~"}, "/~1~0"},
		{[]string{""}, "/"},
		{[]string{"finalizers", "-"}, "/finalizers/-"},
	}
	for _, tt := range tests {
		if got := Pointer(tt.segments...); got != tt.want {
			t.Errorf("Pointer(%q) = %q, want %q", tt.segments, got, tt.want)
		}
	}
}

func TestPointerRoundTripsThroughTheLibrary(t *testing.T) {
	for _, key := range []string{"a/b", "a~b", "~1", "/~", "~0~1//", "plain"} {
		doc := map[string]any{"m": map[string]any{key: "old"}}
		var p Patch
		p.Test(Pointer("m", key), "old")
		p.Add(Pointer("m", key), "new")
		got, err := applyJSONPatch(t, doc, p)
		if err != nil {
			t.Errorf("key %q: %v", key, err)
			continue
		}
		if v := got["m"].(map[string]any)[key]; v != "new" {
			t.Errorf("key %q: value %v, want new (doc %s)", key, v, mustJSON(t, got))
		}
	}
}

func TestOpJSONKeepsFalsyValuesExceptForRemove(t *testing.T) {
	tests := []struct {
		name string
		op   Op
		want string
	}{
		{"test null", Op{Op: "test", Path: "/a", Value: nil}, `{"op":"test","path":"/a","value":null}`},
		{"test false", Op{Op: "test", Path: "/a", Value: false}, `{"op":"test","path":"/a","value":false}`},
		{"test empty string", Op{Op: "test", Path: "/a", Value: ""}, `{"op":"test","path":"/a","value":""}`},
		{"test zero", Op{Op: "test", Path: "/a", Value: 0}, `{"op":"test","path":"/a","value":0}`},
		{"add null", Op{Op: "add", Path: "/a", Value: nil}, `{"op":"add","path":"/a","value":null}`},
		{"add false", Op{Op: "add", Path: "/a", Value: false}, `{"op":"add","path":"/a","value":false}`},
		{"add empty map", Op{Op: "add", Path: "/a", Value: map[string]any{}}, `{"op":"add","path":"/a","value":{}}`},
		{"add empty list", Op{Op: "add", Path: "/a", Value: []string{}}, `{"op":"add","path":"/a","value":[]}`},
		{"replace false", Op{Op: "replace", Path: "/a", Value: false}, `{"op":"replace","path":"/a","value":false}`},
		{"remove", Op{Op: "remove", Path: "/a"}, `{"op":"remove","path":"/a"}`},
		{"remove ignores a value", Op{Op: "remove", Path: "/a", Value: "x"}, `{"op":"remove","path":"/a"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.op)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPatchBuildersAppendInOrder(t *testing.T) {
	var p Patch
	p.Test("/t", "v")
	p.Add("/a", 1)
	p.Remove("/r")
	want := Patch{{Op: "test", Path: "/t", Value: "v"}, {Op: "add", Path: "/a", Value: 1}, {Op: "remove", Path: "/r"}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got %+v, want %+v", p, want)
	}
}

func TestPatchEmptyIgnoresTests(t *testing.T) {
	tests := []struct {
		name string
		p    Patch
		want bool
	}{
		{"nil", nil, true},
		{"only tests", Patch{{Op: "test", Path: "/a"}, {Op: "test", Path: "/b"}}, true},
		{"an add", Patch{{Op: "test", Path: "/a"}, {Op: "add", Path: "/b"}}, false},
		{"a remove", Patch{{Op: "remove", Path: "/b"}}, false},
	}
	for _, tt := range tests {
		if got := tt.p.Empty(); got != tt.want {
			t.Errorf("%s: Empty() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPatchJSONOfNothingIsAnEmptyList(t *testing.T) {
	for _, p := range []Patch{nil, {}} {
		got, err := p.JSON()
		if err != nil || string(got) != "[]" {
			t.Errorf("JSON(%#v) = %s, %v; want []", p, got, err)
		}
	}
}

func TestApplyMerge(t *testing.T) {
	tests := []struct {
		name, doc, merge, want string
	}{
		{"null deletes", `{"a":1,"b":2}`, `{"a":null}`, `{"b":2}`},
		{"null for a missing key", `{"a":1}`, `{"z":null}`, `{"a":1}`},
		{"scalar replaces", `{"a":1}`, `{"a":"x"}`, `{"a":"x"}`},
		{"nested maps merge", `{"m":{"a":1,"b":2}}`, `{"m":{"b":null,"c":3}}`, `{"m":{"a":1,"c":3}}`},
		{"a map over a scalar drops its nulls", `{"m":1}`, `{"m":{"a":null,"b":{"c":null,"d":1}}}`, `{"m":{"b":{"d":1}}}`},
		{"lists replace whole", `{"l":[1,2]}`, `{"l":[3]}`, `{"l":[3]}`},
		{"empty merge", `{"a":1}`, `{}`, `{"a":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ApplyMerge(obj(t, tt.doc), obj(t, tt.merge))
			if mustJSON(t, got) != mustJSON(t, obj(t, tt.want)) {
				t.Errorf("got %s, want %s", mustJSON(t, got), tt.want)
			}
		})
	}
	if got := ApplyMerge(nil, map[string]any{"a": map[string]any{"b": nil, "c": 1.0}}); mustJSON(t, got) != `{"a":{"c":1}}` {
		t.Errorf("ApplyMerge(nil, ...) = %s", mustJSON(t, got))
	}
}

func TestApplyMergeDoesNotMutateItsInput(t *testing.T) {
	doc := obj(t, `{"metadata":{"labels":{"a":"1","b":"2"},"annotations":{"x":"y"}},"spec":{"l":[1,2]}}`)
	merge := obj(t, `{"metadata":{"labels":{"a":null,"c":"3"},"annotations":null},"spec":{"l":[9]},"status":{"s":null}}`)
	docBefore, mergeBefore := mustJSON(t, doc), mustJSON(t, merge)
	out := ApplyMerge(doc, merge)
	if mustJSON(t, doc) != docBefore {
		t.Errorf("doc changed:\n%s\n%s", docBefore, mustJSON(t, doc))
	}
	if mustJSON(t, merge) != mergeBefore {
		t.Errorf("merge changed:\n%s\n%s", mergeBefore, mustJSON(t, merge))
	}
	// Writing to the result must not reach the input either.
	out["metadata"].(map[string]any)["labels"].(map[string]any)["d"] = "4"
	if mustJSON(t, doc) != docBefore {
		t.Error("result shares a changed map with doc")
	}
}

func TestComposeMergeKeepsNullsAndComposesNestedMaps(t *testing.T) {
	tests := []struct {
		name, a, b, want string
	}{
		{"disjoint keys", `{"a":1}`, `{"b":2}`, `{"a":1,"b":2}`},
		{"b wins for a scalar", `{"a":1}`, `{"a":2}`, `{"a":2}`},
		{"nulls are kept from a", `{"a":null}`, `{"b":1}`, `{"a":null,"b":1}`},
		{"nulls are kept from b", `{"a":1}`, `{"a":null}`, `{"a":null}`},
		{"nested maps compose", `{"m":{"x":1,"y":null}}`, `{"m":{"z":2,"x":null}}`, `{"m":{"x":null,"y":null,"z":2}}`},
		{"deeply nested", `{"m":{"n":{"a":1}}}`, `{"m":{"n":{"b":2}}}`, `{"m":{"n":{"a":1,"b":2}}}`},
		{"a scalar over a map", `{"m":{"x":1}}`, `{"m":3}`, `{"m":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := obj(t, tt.a), obj(t, tt.b)
			aBefore, bBefore := mustJSON(t, a), mustJSON(t, b)
			got := ComposeMerge(a, b)
			if mustJSON(t, got) != mustJSON(t, obj(t, tt.want)) {
				t.Errorf("got %s, want %s", mustJSON(t, got), tt.want)
			}
			if mustJSON(t, a) != aBefore || mustJSON(t, b) != bBefore {
				t.Error("ComposeMerge changed its input")
			}
		})
	}
	if got := ComposeMerge(nil, map[string]any{"a": nil}); mustJSON(t, got) != `{"a":null}` {
		t.Errorf("ComposeMerge(nil, b) = %s", mustJSON(t, got))
	}
	if got := ComposeMerge(map[string]any{"a": nil}, nil); mustJSON(t, got) != `{"a":null}` {
		t.Errorf("ComposeMerge(a, nil) = %s", mustJSON(t, got))
	}
}

// TestComposeMergeEqualsApplyingInTurn checks, against the library's merge
// patch, that the composition has the effect of applying a then b.
func TestComposeMergeEqualsApplyingInTurn(t *testing.T) {
	target := obj(t, `{"metadata":{"labels":{"a":"1","b":"2"},"annotations":{"k":"v"}},"spec":{"n":1,"m":{"x":1}}}`)
	tests := []struct{ a, b string }{
		{`{"metadata":{"labels":{"a":"x"}}}`, `{"metadata":{"labels":{"b":null}}}`},
		{`{"metadata":{"labels":{"a":null}}}`, `{"metadata":{"annotations":{"k":null,"j":"w"}}}`},
		{`{"spec":{"n":2}}`, `{"spec":{"n":3,"m":{"y":2}}}`},
		{`{"spec":{"m":{"x":null}}}`, `{"spec":{"m":{"z":1}}}`},
		{`{"status":{"phase":"A"}}`, `{"status":{"phase":"B","reason":"r"}}`},
		{`{"spec":{"m":{"x":2}}}`, `{"spec":{"m":null}}`},
	}
	for _, tt := range tests {
		a, b := obj(t, tt.a), obj(t, tt.b)
		want := applyMergeLib(t, applyMergeLib(t, target, a), b)
		got := applyMergeLib(t, target, ComposeMerge(a, b))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("a=%s b=%s:\n got %s\nwant %s", tt.a, tt.b, mustJSON(t, got), mustJSON(t, want))
		}
	}
}

func TestDecodeMerge(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]any
		wantErr string
	}{
		{"empty is no patch", "", nil, ""},
		{"an object", `{"a":{"b":null}}`, map[string]any{"a": map[string]any{"b": nil}}, ""},
		{"null is not an object", `null`, nil, "must be a JSON object"},
		{"a list is not an object", `[1]`, nil, "decoding merge patch"},
		{"a string is not an object", `"x"`, nil, "decoding merge patch"},
		{"malformed", `{"a":`, nil, "decoding merge patch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeMerge([]byte(tt.in))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

// The hand-written encoding writes what encoding/json writes, byte for
// byte, for every kind of value and every string that needs escaping.
func TestPatchJSONIsWhatEncodingJSONWrites(t *testing.T) {
	strs := []string{"", "plain/path-1.2_3", `quote " and \ backslash`, "<html>&", "tab\tnewline\n\x00",
		"ünïcode ☃", "line\u2028sep\u2029", "bad utf8 \xff\xfe", "del \x7f"}
	var p Patch
	for _, s := range strs {
		p.Test(Pointer("metadata", s), s)
	}
	for _, v := range []any{nil, false, true, int64(3), 2.5, "", []any{}, map[string]any{},
		[]any{"a", int64(1), nil}, map[string]any{"k": map[string]any{"<": "&"}}} {
		p.Add("/spec/x", v)
	}
	p.Remove("/metadata/finalizers")
	p.Remove("/a~1b")

	ref := make([]reflectedOp, len(p))
	for i, o := range p {
		ref[i] = reflectedOp(o)
	}
	want, err := json.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}

	got, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("JSON()\n got %s\nwant %s", got, want)
	}
	if one, err := json.Marshal(p[0]); err != nil || string(one) != string(got[1:len(one)+1]) {
		t.Errorf("json.Marshal(op) = %s, %v; want the patch's first operation", one, err)
	}
	if nilJSON, err := Patch(nil).JSON(); err != nil || string(nilJSON) != "[]" {
		t.Errorf("nil patch: %s, %v", nilJSON, err)
	}
	if _, err := (Patch{{Op: "add", Path: "/x", Value: func() {}}}).JSON(); err == nil {
		t.Error("a value encoding/json cannot encode: no error")
	}
}

// holdAndResult is the patch of a create's ack: the guards, the hold and
// the stored result.
func holdAndResult() Patch {
	var p Patch
	p.Test("/metadata/uid", "0b5bd7b4-6cd0-4a7b-9a4e-2f3b6f8a1c11")
	p.Test("/metadata/resourceVersion", "123456")
	p.Add("/metadata/finalizers", []any{"tether.dev/bench"})
	p.Add("/metadata/annotations/tether.dev~1bench.create.result", `{"ok":true}`)
	return p
}

func BenchmarkPatchJSON(b *testing.B) {
	p := holdAndResult()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.JSON(); err != nil {
			b.Fatal(err)
		}
	}
}

// reflectedOp encodes an operation as Op did before appendJSON, through
// encoding/json's reflection: the baseline of BenchmarkPatchJSON.
type reflectedOp Op

func (o reflectedOp) MarshalJSON() ([]byte, error) {
	if o.Op == "remove" {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{o.Op, o.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{o.Op, o.Path, o.Value})
}

func BenchmarkPatchJSONReflected(b *testing.B) {
	var ops []reflectedOp
	for _, o := range holdAndResult() {
		ops = append(ops, reflectedOp(o))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(ops); err != nil {
			b.Fatal(err)
		}
	}
}
