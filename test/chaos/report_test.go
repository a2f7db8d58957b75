package chaos

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// report runs Check and Summarize on h and returns the report's lines.
func report(t *testing.T, h *History) []string {
	t.Helper()
	var b strings.Builder
	Report(&b, h, Summarize(h), Check(h))
	t.Logf("the report:\n%s", b.String())
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

// wantLines checks that each pattern matches a whole line of lines, and
// that they come in that order.
func wantLines(t *testing.T, lines []string, patterns ...string) {
	t.Helper()
	i := 0
	for _, p := range patterns {
		re := regexp.MustCompile("^" + p + "$")
		for i < len(lines) && !re.MatchString(lines[i]) {
			i++
		}
		if i == len(lines) {
			t.Errorf("no line %q (in order)", p)
			return
		}
	}
}

func TestReportShowsTheRunAndEachViolation(t *testing.T) {
	h := history(deletedWidget("w1", 1), heldThenReleased("w2"), // w2 is released at 12 unanswered
		Fault{At: at(5), Healed: at(8), Kind: FaultHandlerKill, Target: "handler-1"},
		Fault{At: at(9.5), Kind: FaultNetReset, Target: "broker->apiserver"},
		BrokerReport{Name: "broker-a", Panics: []string{"panic: boom"}})
	lines := report(t, h)
	wantLines(t, lines,
		`seed +7`,
		`duration +10m0s`,
		`objects created +1`,
		`deliveries +2`,
		`  create +1`,
		`  delete +1`,
		`faults +2`,
		`  handler-kill +1`,
		`  net-reset +1`,
		`duplicates +0`,
		`violations +2`,
		`  rule 2 strict-released +0`,
		`  rule 3 stuck-hold, delete-skipped +1`,
		`  rule 4 foreign-removed +0`,
		`  rule 5 late-delivery +0`,
		`  rule 6 create-missed +0`,
		`  rule 7 broker-panic, leak +1`,
		`release latency +p50 +p99 +objects`,
		`  handler-kill +300ms +300ms +1`,
		`  net-reset +3s +3s +1`,
		`rule 3 delete-skipped: widgets load/n-w2 uid w2 at \+12s`,
		`  the hold tether\.dev/chaos was released \(seen deleting without it at \+12s\) before its "delete" binding answered ok or fail; it was never delivered`,
		`  fault handler-kill handler-1 at \+5s, healed \+8s`,
		`  fault net-reset broker->apiserver at \+9\.5s`,
		`rule 7 broker-panic: broker broker-a at \+11m40s`,
		`  1 panic line\(s\); the first: panic: boom`,
		`reproduce: make chaos SEED=7`,
	)
	if last := lines[len(lines)-1]; last != "reproduce: make chaos SEED=7" {
		t.Errorf("the last line is %q", last)
	}
}

func TestReportWithoutViolationsShowsZeroRows(t *testing.T) {
	h := history(deletedWidget("w1", 1))
	h.Quiet = h.Start.Add(72300 * time.Millisecond)
	lines := report(t, h)
	wantLines(t, lines,
		`duration +1m12\.3s`,
		`violations +0`,
		`  rule 2 strict-released +0`, `  rule 3 stuck-hold, delete-skipped +0`, `  rule 4 foreign-removed +0`,
		`  rule 5 late-delivery +0`, `  rule 6 create-missed +0`, `  rule 7 broker-panic, leak +0`,
		`  none +300ms +300ms +1`,
		``,
		`reproduce: make chaos SEED=7`,
	)
	violation := regexp.MustCompile(`^rule \d [a-z-]+: `)
	for _, l := range lines {
		if violation.MatchString(l) {
			t.Errorf("a violation's line: %q", l)
		}
	}
}

func TestReportShowsOffsetsFromTheStart(t *testing.T) {
	for _, c := range []struct {
		sec  float64
		want string
	}{{72.34, "+1m12.3s"}, {0, "+0s"}, {-1.5, "-1.5s"}, {0.04, "+0s"}} {
		if got := sinceStart(t0, at(c.sec)); got != c.want {
			t.Errorf("%v s: got %q, want %q", c.sec, got, c.want)
		}
	}
	if got := sinceStart(t0, time.Time{}); got != "?" {
		t.Errorf("no time: got %q", got)
	}
}

func TestLeaksAreJudgedOnTheProcessThatLedLongest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(gen int, s int, goroutines int) sample {
		return sample{at: t0.Add(time.Duration(s) * time.Second), generation: gen, leading: true, goroutines: goroutines}
	}
	following := func(s sample) sample {
		s.leading = false
		return s
	}
	for _, tc := range []struct {
		name        string
		ss          []sample
		first, last int // goroutines of the samples judged; 0: none
	}{
		{"none", nil, 0, 0},
		{"one process, warm-up skipped", []sample{at(1, 0, 10), at(1, 20, 20), at(1, 30, 30), at(1, 90, 40)}, 30, 40},
		{"never warm", []sample{at(1, 0, 10), at(1, 20, 20)}, 0, 0},
		{"one warm sample is no span", []sample{at(1, 0, 10), at(1, 30, 30)}, 0, 0},
		{"killed: the longer of two lives", []sample{
			at(1, 0, 10), at(1, 30, 11), at(1, 60, 12), // 30 s once warm
			at(2, 70, 20), at(2, 100, 21), at(2, 200, 22), // 100 s once warm
			at(3, 210, 30), at(3, 240, 31), at(3, 260, 32), // 20 s
		}, 21, 22},
		{"a follower's samples are not judged: warm from when it leads", []sample{
			following(at(1, 0, 10)), following(at(1, 30, 10)), following(at(1, 60, 10)),
			at(1, 70, 100), at(1, 90, 110), at(1, 100, 120), at(1, 160, 130),
		}, 120, 130},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, last, ok := longestLeading(tc.ss)
			if ok != (tc.first != 0) || ok && (first.goroutines != tc.first || last.goroutines != tc.last) {
				t.Errorf("longestLeading = %v, %v, %v; want goroutines %d and %d", first, last, ok, tc.first, tc.last)
			}
		})
	}
}

func TestDuplicatesCountRepeatedAnswersButNotTicksDaemonsOrReviews(t *testing.T) {
	d := func(kind, uid, rv string) Delivery {
		return Delivery{Kind: kind, Binding: kind, UID: uid, ResourceVersion: rv, Outcome: "ok"}
	}
	h := &History{Deliveries: []Delivery{
		d("create", "u1", "1"), d("create", "u1", "1"), // delivered again: a duplicate
		d("update", "u1", "2"), d("update", "u1", "3"), // two updates
		d("tick", "u1", "3"), d("tick", "u1", "3"),
		d("daemon", "u1", "3"), d("daemon", "u1", "3"),
		// Reviews of CREATEs have no UID or resourceVersion yet.
		d("validate", "", ""), d("validate", "", ""), d("validate", "", ""),
	}}
	if got := Summarize(h).Duplicates; got != 1 {
		t.Errorf("Duplicates = %d, want 1: the create answered twice", got)
	}
}
