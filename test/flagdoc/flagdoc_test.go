package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestTheFlagReferenceSaysWhatTheBinariesSay builds the commands and fails
// when docs/reference/flags.md is not what their -help generates.
func TestTheFlagReferenceSaysWhatTheBinariesSay(t *testing.T) {
	root := filepath.Join("..", "..")
	want, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatalf("reading the committed page: %v; run 'make docs' and commit %s", err, page)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from what the binaries' -help generates; run 'make docs' and commit it", page)
	}
}

func TestADefaultIsTakenOnlyWhenTheFlagPackageAppendedIt(t *testing.T) {
	for _, c := range []struct {
		name, text, value, wantText, wantDef string
	}{
		{"a string default is quoted", `gRPC listen address (default "127.0.0.1:7443")`, "string", "gRPC listen address", "127.0.0.1:7443"},
		{"a named string value is still quoted", `broker address HOST:PORT (default "127.0.0.1:7443")`, "HOST:PORT", "broker address HOST:PORT", "127.0.0.1:7443"},
		{"a duration is bare", "how long (default 30s)", "duration", "how long", "30s"},
		{"a boolean true is bare", "refuse Secrets (default true)", "", "refuse Secrets", "true"},
		{"a string's own words about its default stay text", "its name (default $POD_NAME, else the host name)", "string", "its name (default $POD_NAME, else the host name)", ""},
		{"a bare word after a string flag stays text", "the Deployment (default $TETHER_DEPLOYMENT)", "string", "the Deployment (default $TETHER_DEPLOYMENT)", ""},
		{"a duration's own words about its default stay text", "renew (default two thirds of the lease duration, at most 10s)", "duration", "renew (default two thirds of the lease duration, at most 10s)", ""},
		{"no default", "the key of --tls-cert-file", "string", "the key of --tls-cert-file", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			text, def := splitDefault(c.text, c.value)
			if text != c.wantText || def != c.wantDef {
				t.Errorf("splitDefault(%q, %q) = %q, %q; want %q, %q", c.text, c.value, text, def, c.wantText, c.wantDef)
			}
		})
	}
}

func TestHelpIsReadFlagByFlag(t *testing.T) {
	help := "Usage: tool [flags]\n       tool other\n\nDoes a thing.\n\nFlags:\n" +
		"  -a\tone-letter flag\n" +
		"  -listen string\n    \tthe address;\n    \tsecond line (default \":1\")\n" +
		"  -on\n    \ta boolean\n"
	s, err := parseHelp("tool", help)
	if err != nil {
		t.Fatal(err)
	}
	want := []flagDoc{
		{name: "a", text: "one-letter flag"},
		{name: "listen", value: "string", def: ":1", text: "the address; second line"},
		{name: "on", text: "a boolean"},
	}
	if len(s.flags) != len(want) {
		t.Fatalf("flags = %+v; want %+v", s.flags, want)
	}
	for i := range want {
		if s.flags[i] != want[i] {
			t.Errorf("flag %d = %+v; want %+v", i, s.flags[i], want[i])
		}
	}
	if len(s.usage) != 2 || s.usage[0] != "tool [flags]" || s.usage[1] != "tool other" {
		t.Errorf("usage = %q", s.usage)
	}
	if len(s.description) != 1 || s.description[0] != "Does a thing." {
		t.Errorf("description = %q", s.description)
	}
}
