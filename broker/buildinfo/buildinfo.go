package buildinfo

import (
	"runtime/debug"
)

// stamped is set by the linker; empty in a plain go build or go run.
var stamped string

// Version is this build's version.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	return describe(stamped, info, ok)
}

// revisionLength is as many hex digits of the commit as git's short form.
const revisionLength = 12

// describe is Version's rule as a function of its inputs.
func describe(stamped string, info *debug.BuildInfo, ok bool) string {
	if stamped != "" {
		return stamped
	}
	if !ok {
		return "dev"
	}
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case revision == "" && info.Main.Version != "" && info.Main.Version != "(devel)":
		return info.Main.Version // go install module@version
	case revision == "":
		return "dev"
	}
	v := "dev-" + revision[:min(len(revision), revisionLength)]
	if modified == "true" {
		v += "-dirty"
	}
	return v
}
