package chaos

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Stats are the numbers of a run the report shows beside its violations.
type Stats struct {
	Deliveries       int
	DeliveriesByKind map[string]int
	// DeliveriesByInstance shows that every instance took part, the
	// Python one too.
	DeliveriesByInstance map[string]int
	// Duplicates counts the deliveries answered ok for a (UID, binding,
	// kind, resourceVersion) already answered ok. Delivery is at least
	// once, so they are no violation; ticks and daemons repeat by design,
	// and a review is the API server's call, neither is counted.
	Duplicates     int
	Faults         int
	FaultsByKind   map[FaultKind]int
	ObjectsCreated int
	// ReleaseLatency is how long deleted objects took to go, by the kind
	// of the last fault injected in the 30 s up to the delete (NoFault
	// when none).
	ReleaseLatency map[FaultKind]Latency
}

// NoFault is the ReleaseLatency of deletes with no fault before them.
const NoFault FaultKind = "none"

// Latency sums up N durations.
type Latency struct {
	N        int
	P50, P99 time.Duration
}

// Summarize computes a history's Stats. It is pure.
func Summarize(h *History) Stats {
	ix := newHistIndex(h)
	st := Stats{
		Deliveries: len(h.Deliveries), DeliveriesByKind: map[string]int{}, DeliveriesByInstance: map[string]int{}, Faults: len(h.Faults),
		FaultsByKind: map[FaultKind]int{}, ReleaseLatency: map[FaultKind]Latency{},
	}
	type key struct{ uid, binding, kind, rv string }
	seen := map[key]bool{}
	for _, d := range h.Deliveries {
		st.DeliveriesByKind[d.Kind]++
		st.DeliveriesByInstance[d.Instance]++
		if d.Outcome != "ok" || d.Kind == "tick" || d.Kind == "daemon" || d.Kind == "validate" {
			continue
		}
		k := key{d.UID, d.Binding, d.Kind, d.ResourceVersion}
		if seen[k] {
			st.Duplicates++
		}
		seen[k] = true
	}
	for _, f := range h.Faults {
		st.FaultsByKind[f.Kind]++
	}
	for _, op := range h.Ops {
		if op.Kind == OpCreate && op.Err == "" {
			st.ObjectsCreated++
		}
	}
	took := map[FaultKind][]time.Duration{}
	for uid, ops := range ix.ops {
		i := slices.IndexFunc(ops, func(o *Op) bool { return o.Kind == OpDelete && o.Err == "" })
		// The delete's time is logged once the call returned, which may be
		// after the watch saw the object go.
		if g := ix.life[uid].gone; i >= 0 && g != nil && !g.At.Before(ops[i].At.Add(-clockSkew)) {
			k := ix.faultBefore(ops[i].At)
			took[k] = append(took[k], max(0, g.At.Sub(ops[i].At)))
		}
	}
	for k, ds := range took {
		slices.Sort(ds)
		st.ReleaseLatency[k] = Latency{N: len(ds), P50: percentile(ds, 50), P99: percentile(ds, 99)}
	}
	return st
}

// faultBefore is the kind of the last fault injected at or before at, and
// at most faultContext before it; NoFault when none.
func (ix *histIndex) faultBefore(at time.Time) FaultKind {
	i, _ := slices.BinarySearchFunc(ix.faults, at, func(f Fault, t time.Time) int {
		if f.At.After(t) {
			return 1
		}
		return -1
	})
	if i > 0 && at.Sub(ix.faults[i-1].At) <= faultContext {
		return ix.faults[i-1].Kind
	}
	return NoFault
}

// percentile is the nearest-rank p-th percentile of sorted ds.
func percentile(ds []time.Duration, p int) time.Duration {
	return ds[max(0, (p*len(ds)+99)/100-1)]
}

// Report writes a run's table, then each violation with the faults around
// it, then how to run it again.
func Report(w io.Writer, h *History, st Stats, vs []Violation) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "seed\t%d\n", h.Seed)
	fmt.Fprintf(tw, "duration\t%v\n", h.Quiet.Sub(h.Start).Round(100*time.Millisecond))
	fmt.Fprintf(tw, "objects created\t%d\n", st.ObjectsCreated)
	fmt.Fprintf(tw, "deliveries\t%d\n", st.Deliveries)
	for _, k := range slices.Sorted(maps.Keys(st.DeliveriesByKind)) {
		fmt.Fprintf(tw, "  %s\t%d\n", k, st.DeliveriesByKind[k])
	}
	for _, k := range slices.Sorted(maps.Keys(st.DeliveriesByInstance)) {
		fmt.Fprintf(tw, "  by %s\t%d\n", k, st.DeliveriesByInstance[k])
	}
	fmt.Fprintf(tw, "faults\t%d\n", st.Faults)
	for _, k := range slices.Sorted(maps.Keys(st.FaultsByKind)) {
		fmt.Fprintf(tw, "  %s\t%d\n", k, st.FaultsByKind[k])
	}
	fmt.Fprintf(tw, "duplicates\t%d\n", st.Duplicates)
	fmt.Fprintf(tw, "API warnings to the load\t%d (a review that failed open sends one)\n", h.Warnings)
	fmt.Fprintf(tw, "violations\t%d\n", len(vs))
	var counts [len(ruleChecks)]int
	for _, v := range vs {
		if v.Rule > 0 && v.Rule < len(counts) {
			counts[v.Rule]++
		}
	}
	for n, checks := range ruleChecks {
		if checks != "" {
			fmt.Fprintf(tw, "  rule %d %s\t%d\n", n, checks, counts[n])
		}
	}
	for _, b := range h.Brokers {
		if b.Sampled == 0 {
			fmt.Fprintf(tw, "%s\tno process led for %v and more\n", b.Name, warmUp)
			continue
		}
		fmt.Fprintf(tw, "%s\tgoroutines %d → %d, RSS %d → %d MiB over %v leading (its start %d)\n", b.Name, b.FirstGoroutines,
			b.LastGoroutines, b.FirstRSS>>20, b.LastRSS>>20, b.Sampled.Round(time.Second), b.Process)
	}
	fmt.Fprintf(tw, "release latency\tp50\tp99\tobjects\n")
	for _, k := range slices.Sorted(maps.Keys(st.ReleaseLatency)) {
		l := st.ReleaseLatency[k]
		fmt.Fprintf(tw, "  %s\t%v\t%v\t%d\n", k, l.P50.Round(time.Millisecond), l.P99.Round(time.Millisecond), l.N)
	}
	tw.Flush()
	for _, v := range vs {
		fmt.Fprintf(w, "\nrule %d %s: %s at %s\n  %s\n", v.Rule, v.Check, v.subject(), sinceStart(h.Start, v.At), v.Detail)
		for _, f := range v.Faults {
			healed := ""
			if !f.Healed.IsZero() {
				healed = ", healed " + sinceStart(h.Start, f.Healed)
			}
			fmt.Fprintf(w, "  fault %s %s at %s%s\n", f.Kind, f.Target, sinceStart(h.Start, f.At), healed)
		}
	}
	fmt.Fprintf(w, "\nreproduce: make chaos SEED=%d\n", h.Seed)
}

// String is the violation on one line, at its wall-clock time.
func (v Violation) String() string {
	return fmt.Sprintf("rule %d %s: %s at %s: %s", v.Rule, v.Check, v.subject(), v.At.Format("15:04:05.000"), v.Detail)
}

// subject names what a violation is about: "widgets ns/name uid 1234".
func (v Violation) subject() string {
	s := strings.TrimPrefix(v.Namespace+"/"+v.Name, "/")
	if v.UID != "" {
		s += " uid " + v.UID
	}
	return v.Resource + " " + s
}

// sinceStart shows t as an offset from the run's start, e.g. "+1m12.3s".
func sinceStart(start, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := t.Sub(start).Round(100 * time.Millisecond)
	if d < 0 {
		return d.String()
	}
	return "+" + d.String()
}
