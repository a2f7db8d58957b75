package main

// A round's cases run alone, one after the other, or with -slices S as a
// group: the cases of one workload all started, each phase done in S
// slices, the cases taking turns at each. A machine's load drifts over
// minutes; in turns a slice long, every case of the group sees the same
// drift.

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// caseGroups are the groups a round's cases run in, in order: each case
// alone, or with together the cases of each workload (roundCases keeps
// them next to each other).
func caseGroups(cases []benchCase, together bool) [][]benchCase {
	var groups [][]benchCase
	for _, cs := range cases {
		if together && len(groups) > 0 && groups[len(groups)-1][0].workload == cs.workload {
			groups[len(groups)-1] = append(groups[len(groups)-1], cs)
			continue
		}
		groups = append(groups, []benchCase{cs})
	}
	return groups
}

// sliceOrder is the order of runs at slice s (from 0): the group's order,
// backwards at odd slices, so that no case always follows the same one.
func sliceOrder[T any](runs []T, s int) []T {
	order := slices.Clone(runs)
	if s%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// caseRun is one case of a group: its controller serving its namespace,
// and what its slices of the current phase measured.
type caseRun struct {
	cs  benchCase
	c   controller
	tr  *tracker
	ns  string
	ctx context.Context // ends if the controller dies

	seconds float64
	cpu     []time.Duration
	writes  delta
}

// runGroup starts the controllers of cases (one each, cons), each in a
// namespace of its own, then for each phase creates (or deletes) n Widgets
// in every namespace in slices of n/slices, the cases taking turns at each
// slice, and waits at each until the case's controller handled them (or
// they are gone). A case's row sums its slices; each row has the
// machine's CPU steal over the whole phase and its load average at the
// end.
func runGroup(ctx context.Context, e *env, cases []benchCase, cons []controller, n, round, nslices int) ([]row, error) {
	runs := make([]*caseRun, len(cases))
	for i, cs := range cases {
		r := &caseRun{cs: cs, c: cons[i], ns: fmt.Sprintf("bench-%s-%d-%d", cs.id(), n, round)}
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}
		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating namespace %s: %w", r.ns, err)
		}
		var err error
		if r.tr, err = startTracker(ctx, e, r.ns, r.c.done); err != nil {
			return nil, err
		}
		defer r.tr.stop()
		defer r.c.stop()
		if r.ctx, err = r.c.start(ctx, r.ns); err != nil {
			return nil, err
		}
		runs[i] = r
	}
	var rows []row
	for _, phase := range []string{"create", "delete"} {
		stat0, statErr0 := readCPUTimes()
		for s := range nslices {
			for _, r := range sliceOrder(runs, s) {
				if err := r.slice(e, n, phase, s*n/nslices, (s+1)*n/nslices); err != nil {
					return nil, err
				}
			}
		}
		stat1, statErr1 := readCPUTimes()
		for _, r := range runs {
			rw := r.row(n, round, phase)
			rw.steal, rw.stealOK = stealPercent(stat0, stat1, statErr0, statErr1)
			label := fmt.Sprintf("%s N=%d %s", r.cs.id(), n, phase)
			if err := r.c.profile(r.ctx, fmt.Sprintf("%s-%d-%d-%s", r.cs.id(), n, round, phase)); err != nil {
				return nil, fmt.Errorf("%s: -profile: %w", label, err)
			}
			e.progressf("%s: %d objects in %.2fs (%.1f/s), writes/object %s, CPU ms/object %s, peak RSS MiB (private) %s, CPU steal %s, load %s",
				label, n, rw.seconds, rw.rate(), rw.writes.verbs(), rw.cpuText(), formatMemory(rw.mem), rw.stealText(), rw.load)
			rows = append(rows, rw)
		}
	}
	return rows, nil
}

// slice creates (or deletes) Widgets from to to-1 in r's namespace, waits
// until r's controller is done with them, and adds the time, the CPU and
// the writes to r's phase. The first slice of a phase starts it afresh.
func (r *caseRun) slice(e *env, n int, phase string, from, to int) error {
	label := fmt.Sprintf("%s N=%d %s", r.cs.id(), n, phase)
	if from == 0 {
		r.seconds, r.cpu, r.writes = 0, nil, delta{perObject: map[string]float64{}}
	}
	if to-from < n {
		label += fmt.Sprintf(" [%d-%d)", from, to)
	}
	before, err := settledScrape(r.ctx, e.kube)
	if err != nil {
		return err
	}
	e.progressf("%s: starting", label)
	cpu0, err := r.c.cpu()
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	start := time.Now()
	own, last, err := loadAndWait(r.ctx, e, r.tr, r.ns, from, to, label, start, phase == "delete")
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	after, err := settledScrape(r.ctx, e.kube)
	if err != nil {
		return err
	}
	// Read once the writes settled, so that the work on trailing writes
	// counts, as the writes do.
	cpu1, err := r.c.cpu()
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	r.seconds += last.Sub(start).Seconds()
	if r.cpu == nil {
		r.cpu = make([]time.Duration, len(cpu1))
	}
	for i := range cpu1 {
		r.cpu[i] += cpu1[i] - cpu0[i]
	}
	r.writes.add(diff(before, after, own, n))
	return nil
}

// row is r's phase as the report's row.
func (r *caseRun) row(n, round int, phase string) row {
	return row{scenario: r.cs.scenario, handler: r.cs.handler, workload: r.cs.workload, n: n, round: round, phase: phase,
		seconds: r.seconds, writes: r.writes, mem: r.c.memory(), load: loadAverage(), cpuParts: r.cpu}
}
