package main

import (
	"os"
	"testing"
	"time"
)

func TestParseStatusMiB(t *testing.T) {
	status := "Name:\tbroker\nVmHWM:\t   69632 kB\nRssAnon:\t    6144 kB\nRssFile:\t   36864 kB\n"
	for field, want := range map[string]float64{"VmHWM": 68, "RssAnon": 6, "RssFile": 36} {
		if got, err := parseStatusMiB(status, field); err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", field, got, err, want)
		}
	}
	if _, err := parseStatusMiB(status, "RssShmem"); err == nil {
		t.Error("a missing field: no error")
	}
	if _, err := parseStatusMiB("RssAnon:\tlots kB\n", "RssAnon"); err == nil {
		t.Error("a bad value: no error")
	}
}

func TestStealShareOfTheWindow(t *testing.T) {
	a, err := parseCPUTimes("cpu  100 0 50 800 10 0 5 35 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil || a != (cpuTimes{total: 1000, steal: 35}) {
		t.Fatalf("parseCPUTimes = %+v, %v; want total 1000 (guest not counted again), steal 35", a, err)
	}
	b := cpuTimes{total: 1400, steal: 55}
	if got := stealShare(a, b, nil, nil); got != "5.0%" {
		t.Errorf("stealShare = %s, want 5.0%% (20 of 400)", got)
	}
	if got := stealShare(a, b, nil, os.ErrNotExist); got != "?" {
		t.Errorf("stealShare with a failed reading = %s, want ?", got)
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu 1 2 3\n", "cpu 1 2 3 4 5 6 7 x\n"} {
		if _, err := parseCPUTimes(bad); err == nil {
			t.Errorf("parseCPUTimes(%q): no error", bad)
		}
	}
}

// TestPeakSampler samples this process, then stops with it: once done is
// closed, the goroutine ends and the peak stays readable.
func TestPeakSampler(t *testing.T) {
	done := make(chan struct{})
	s := samplePeak(os.Getpid(), "RssAnon", time.Millisecond, done)
	first, err := s.peak()
	if err != nil || first <= 0 {
		t.Fatalf("peak of a running process: %v, %v", first, err)
	}
	close(done)
	<-s.stopped // the goroutine ends with the process; a leak would hang here
	if last, err := s.peak(); err != nil || last < first {
		t.Errorf("peak after the exit: %v, %v; want at least %v", last, err, first)
	}
}

// TestPeakSamplerNoProcess: nothing sampled is an error, not a zero.
func TestPeakSamplerNoProcess(t *testing.T) {
	done := make(chan struct{})
	close(done)
	s := samplePeak(-1, "RssAnon", time.Hour, done)
	<-s.stopped
	if v, err := s.peak(); err == nil {
		t.Errorf("peak of no process: %v, no error", v)
	}
}
