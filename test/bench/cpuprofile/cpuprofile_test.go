package cpuprofile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestStopWritesTheProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := Start(path)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Errorf("profile %s: %v, %v bytes", path, err, fi)
	}
}

func TestNoPathProfilesNothing(t *testing.T) {
	stop, err := Start("")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	// A second profile can start: the empty path started none.
	stop2, err := Start(filepath.Join(t.TempDir(), "cpu.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	stop2()
}
