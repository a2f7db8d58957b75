package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports (sysconf(_SC_CLK_TCK) would
// need cgo).
const clockTicks = 100

// cpuTime returns the CPU time process pid used so far, user and system,
// from /proc/<pid>/stat (its threads included; children not).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after the last ')' start with field 3, the state.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, field := range f[11:13] { // utime (14) and stime (15)
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// loadAverage returns the first three fields of /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuTimes is the machine's CPU time so far, from the first line of
// /proc/stat: all of it, and what the hypervisor gave to other guests while
// this one wanted to run (steal).
type cpuTimes struct{ total, steal int64 }

func readCPUTimes() (cpuTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseCPUTimes(string(data))
}

// parseCPUTimes reads the "cpu" line: user nice system idle iowait irq
// softirq steal guest guest_nice. guest and guest_nice are already counted
// in user and nice.
func parseCPUTimes(stat string) (cpuTimes, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: first line %q is not the cpu line", line)
	}
	var t cpuTimes
	for i, field := range f[1:9] {
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.total += v
		if i == 7 {
			t.steal = v
		}
	}
	return t, nil
}

// stealShare is the share of the machine's CPU time between a and b that
// was stolen, in percent, or "?" when either reading failed.
func stealShare(a, b cpuTimes, errA, errB error) string {
	p, ok := stealPercent(a, b, errA, errB)
	if !ok {
		return "?"
	}
	return fmt.Sprintf("%.1f%%", p)
}

// stealPercent is stealShare as a number; false when either reading failed.
func stealPercent(a, b cpuTimes, errA, errB error) (float64, bool) {
	if errA != nil || errB != nil || b.total <= a.total {
		return 0, false
	}
	return 100 * float64(b.steal-a.steal) / float64(b.total-a.total), true
}

// load1 is the one-minute load average of a loadAverage string, false when
// it has none.
func load1(loadavg string) (float64, bool) {
	f, _, _ := strings.Cut(loadavg, " ")
	v, err := strconv.ParseFloat(f, 64)
	return v, err == nil
}

// childPID finds a child of this process by its command name (as in
// /proc/<pid>/comm), or returns 0. The control plane does not say which
// processes it started; its kube-apiserver is the only child of that name.
func childPID(comm string) int {
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		s := string(data)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 || s[open+1:end] != comm {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == self {
			return pid
		}
	}
	return 0
}

// memSampleEvery is how often the bench samples the private memory of each
// process it started: the kernel keeps a peak of the RSS (VmHWM) but not of
// its parts.
const memSampleEvery = 200 * time.Millisecond

// statusMiB returns field (a size in kB, such as VmHWM or RssAnon) of
// /proc/<pid>/status, in MiB.
func statusMiB(pid int, field string) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	v, err := parseStatusMiB(string(data), field)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return v, nil
}

func parseStatusMiB(status, field string) (float64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("parsing %s %q: %w", field, v, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s", field)
}

// peakSampler keeps the largest value of one field of /proc/<pid>/status
// seen while the process ran.
type peakSampler struct {
	pid     int
	field   string
	done    <-chan struct{} // closed when the process exited
	stopped chan struct{}   // closed when the sampling goroutine ended

	mu  sync.Mutex
	max float64
	ok  bool  // one sample succeeded
	err error // the last failure, reported while none succeeded
}

// samplePeak samples field of process pid now and then every interval in a
// goroutine of its own, until done is closed (the process exited).
func samplePeak(pid int, field string, every time.Duration, done <-chan struct{}) *peakSampler {
	s := &peakSampler{pid: pid, field: field, done: done, stopped: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *peakSampler) sample() {
	v, err := statusMiB(s.pid, s.field)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		// Failures are expected as the process exits (a zombie has no
		// memory fields), so they only count while nothing succeeded.
		s.err = err
		return
	}
	if !s.ok || v > s.max {
		s.max = v
	}
	s.ok = true
}

// peak takes one more sample if the process still runs, so the peak covers
// the moment of the call, and returns the largest value seen, in MiB.
func (s *peakSampler) peak() (float64, error) {
	select {
	case <-s.done:
	default:
		s.sample()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ok {
		return 0, fmt.Errorf("sampling %s: %w", s.field, s.err)
	}
	return s.max, nil
}

// memPeak is one process's peak memory, in MiB.
type memPeak struct {
	role         string // "broker", "handler", "raw"
	rss, private float64
	err          error
}

// formatMemory renders the peaks of a row's processes, the controller's
// first: "51.8 (15.3), handler 19.4 (5.6)".
func formatMemory(ms []memPeak) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		v := fmt.Sprintf("%.1f (%.1f)", m.rss, m.private)
		if m.err != nil {
			v = fmt.Sprintf("? (%v)", m.err)
		}
		if i > 0 {
			v = m.role + " " + v
		}
		parts[i] = v
	}
	return strings.Join(parts, ", ")
}
