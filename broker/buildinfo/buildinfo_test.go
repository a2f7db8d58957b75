package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestDescribe(t *testing.T) {
	vcs := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
		for i := 0; i < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	tests := []struct {
		name    string
		stamped string
		info    *debug.BuildInfo
		ok      bool
		want    string
	}{
		{"the linker's stamp wins", "v0.3.0-4-gabc", vcs("vcs.revision", "0123456789abcdef"), true, "v0.3.0-4-gabc"},
		{"a build from a clean checkout", "", vcs("vcs.revision", "0123456789abcdef", "vcs.modified", "false"), true, "dev-0123456789ab"},
		{"a build from a changed checkout", "", vcs("vcs.revision", "0123456789abcdef", "vcs.modified", "true"), true, "dev-0123456789ab-dirty"},
		{"go install of a tagged module", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, true, "v0.3.0"},
		{"go run or a build without the checkout", "", vcs(), true, "dev"},
		{"no build information", "", nil, false, "dev"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describe(tt.stamped, tt.info, tt.ok); got != tt.want {
				t.Errorf("describe = %q, want %q", got, tt.want)
			}
		})
	}
}
