package sdk

import (
	"encoding/json"
	"math"
	"testing"

	evanphx "gopkg.in/evanphx/json-patch.v4"
)

// decoded decodes a JSON object the way deliveries are decoded (int64 and
// float64 numbers), so test documents read like the wire form.
func decoded(t *testing.T, s string) map[string]any {
	t.Helper()
	u, err := decodeObject([]byte(s))
	if err != nil {
		t.Fatalf("decoding %s: %v", s, err)
	}
	return u.Object
}

func TestJSONPatchTurnsTheOriginalIntoTheModifiedObject(t *testing.T) {
	tests := []struct {
		name     string
		from, to string
		want     string // the patch; "" for none
	}{
		{name: "no change is no patch",
			from: `{"a":1,"b":{"c":[1,2]},"d":null}`, to: `{"a":1,"b":{"c":[1,2]},"d":null}`},
		{name: "integer and float of the same value are equal",
			from: `{"a":1.0,"b":2}`, to: `{"a":1,"b":2.0}`},
		{name: "added key",
			from: `{"a":1}`, to: `{"a":1,"b":"x"}`,
			want: `[{"op":"add","path":"/b","value":"x"}]`},
		{name: "removed key",
			from: `{"a":1,"b":"x"}`, to: `{"a":1}`,
			want: `[{"op":"remove","path":"/b"}]`},
		{name: "replaced scalar",
			from: `{"a":1}`, to: `{"a":2}`,
			want: `[{"op":"replace","path":"/a","value":2}]`},
		{name: "nested maps change member by member, keys in order",
			from: `{"metadata":{"labels":{"x":"1","y":"2"},"name":"n"},"spec":{"r":1}}`,
			to:   `{"metadata":{"labels":{"x":"1","y":"3","z":"4"},"name":"n"},"spec":{}}`,
			want: `[{"op":"replace","path":"/metadata/labels/y","value":"3"},
			        {"op":"add","path":"/metadata/labels/z","value":"4"},
			        {"op":"remove","path":"/spec/r"}]`},
		{name: "map added where there was none",
			from: `{"metadata":{"name":"n"}}`, to: `{"metadata":{"name":"n","labels":{"a":"b"}}}`,
			want: `[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]`},
		{name: "keys with slash and tilde are escaped",
			from: `{"metadata":{"annotations":{"example.com/a":"1","t~x":"1"}}}`,
			to:   `{"metadata":{"annotations":{"example.com/a":"2","t~x":"2","a/~1b":"3"}}}`,
			want: `[{"op":"add","path":"/metadata/annotations/a~1~01b","value":"3"},
			        {"op":"replace","path":"/metadata/annotations/example.com~1a","value":"2"},
			        {"op":"replace","path":"/metadata/annotations/t~0x","value":"2"}]`},
		{name: "empty key",
			from: `{"a":{"":1}}`, to: `{"a":{"":2}}`,
			want: `[{"op":"replace","path":"/a/","value":2}]`},
		{name: "changed array is replaced whole",
			from: `{"l":[1,2,3],"same":[{"a":1}]}`, to: `{"l":[1,3],"same":[{"a":1}]}`,
			want: `[{"op":"replace","path":"/l","value":[1,3]}]`},
		{name: "array element object changed",
			from: `{"l":[{"a":1},{"b":2}]}`, to: `{"l":[{"a":1},{"b":3}]}`,
			want: `[{"op":"replace","path":"/l","value":[{"a":1},{"b":3}]}]`},
		{name: "map becomes string",
			from: `{"a":{"b":1}}`, to: `{"a":"b"}`,
			want: `[{"op":"replace","path":"/a","value":"b"}]`},
		{name: "string becomes map",
			from: `{"a":"b"}`, to: `{"a":{"b":1}}`,
			want: `[{"op":"replace","path":"/a","value":{"b":1}}]`},
		{name: "array becomes map",
			from: `{"a":[]}`, to: `{"a":{}}`,
			want: `[{"op":"replace","path":"/a","value":{}}]`},
		{name: "set to null keeps the key",
			from: `{"a":1}`, to: `{"a":null}`,
			want: `[{"op":"replace","path":"/a","value":null}]`},
		{name: "null to value",
			from: `{"a":null}`, to: `{"a":false}`,
			want: `[{"op":"replace","path":"/a","value":false}]`},
		{name: "added null and false values carry them",
			from: `{}`, to: `{"a":null,"b":false,"c":""}`,
			want: `[{"op":"add","path":"/a","value":null},{"op":"add","path":"/b","value":false},
			        {"op":"add","path":"/c","value":""}]`},
		{name: "everything removed",
			from: `{"a":1,"b":{"c":2}}`, to: `{}`,
			want: `[{"op":"remove","path":"/a"},{"op":"remove","path":"/b"}]`},
		{name: "large integers stay exact",
			from: `{"a":9007199254740993}`, to: `{"a":9007199254740995}`,
			want: `[{"op":"replace","path":"/a","value":9007199254740995}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch, err := jsonPatch(decoded(t, tt.from), decoded(t, tt.to))
			if err != nil {
				t.Fatalf("jsonPatch: %v", err)
			}
			if tt.want == "" {
				if patch != nil {
					t.Fatalf("patch = %s, want none", patch)
				}
				return
			}
			var got, want any
			if err := json.Unmarshal(patch, &got); err != nil {
				t.Fatalf("patch %s: %v", patch, err)
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
				t.Errorf("patch:\ngot  %s\nwant %s", g, w)
			}
			applied := applyPatch(t, tt.from, patch)
			if !equalJSON(decoded(t, applied), decoded(t, tt.to)) {
				t.Errorf("applying the patch to %s gives %s, want %s", tt.from, applied, tt.to)
			}
		})
	}
}

func applyPatch(t *testing.T, doc string, patch []byte) string {
	t.Helper()
	p, err := evanphx.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decoding patch %s: %v", patch, err)
	}
	out, err := p.Apply([]byte(doc))
	if err != nil {
		t.Fatalf("applying patch %s to %s: %v", patch, doc, err)
	}
	return string(out)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestJSONPatchRefusesValuesJSONCannotCarry(t *testing.T) {
	_, err := jsonPatch(map[string]any{"a": 1.0}, map[string]any{"a": math.Inf(1)})
	if err == nil {
		t.Fatal("jsonPatch of +Inf succeeded, want an error")
	}
}

func TestEqualJSONComparesNumbersByValue(t *testing.T) {
	tests := []struct {
		a, b any
		want bool
	}{
		{int64(1), 1.0, true},
		{1.5, int64(1), false},
		{int64(2), int64(2), true},
		{"1", int64(1), false},
		{nil, nil, true},
		{nil, false, false},
		{[]any{int64(1)}, []any{1.0}, true},
		{[]any{int64(1)}, []any{int64(1), int64(2)}, false},
		{map[string]any{"a": nil}, map[string]any{}, false},
		{map[string]any{"a": nil}, map[string]any{"b": nil}, false},
	}
	for _, tt := range tests {
		if got := equalJSON(tt.a, tt.b); got != tt.want {
			t.Errorf("equalJSON(%#v, %#v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
