package cpuprofile

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// Start starts a CPU profile written to path. stop ends it and closes the
// file; call it before the process exits, os.Exit included, or the profile
// is lost. An empty path profiles nothing, and stop does nothing.
func Start(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
