package timerstats

import (
	"math"
	"slices"
	"time"
)

// Schedule is how the timer makes its ticks due.
type Schedule struct {
	Interval time.Duration
	// Sharp timers tick on a fixed grid of the interval; the others at
	// least one interval after the broker received the previous ack (more
	// after a tick the broker sent late).
	Sharp bool
	// Tolerance is how much later than expected (after the ack, or on the
	// grid) the next tick may be due before the ticks in between count as
	// missed; 0 means half the interval, so that the count rounds to the
	// nearest tick.
	Tolerance time.Duration
}

// Summarize counts the ticks by when they were due, as the timer's own
// schedule defines it: a tick is expected when it came due inside the
// window, and delivered when it arrived, even after the window's end. A
// sharp timer's ticks are due on its grid; any other timer's tick is due at
// least one interval after the broker received the previous ack, which is
// reconstructed from the handler's ack times: when the next tick is due
// more than the tolerance later than (ack + interval), or never comes, the
// ticks that would have been due meanwhile are missed. Without a window
// (w nil) only the totals are filled in.
func Summarize(t *Ticks, w *Window, sc Schedule) Summary {
	s := Summary{Ticks: int64(t.Len()), Objects: len(t.UIDs), Window: w}
	if w == nil {
		return s
	}
	if sc.Tolerance <= 0 {
		sc.Tolerance = sc.Interval / 2
	}
	from, to := w.FromUnixNano, w.ToUnixNano
	in := func(t int64) bool { return t >= from && t < to }
	iv, tol := int64(sc.Interval), int64(sc.Tolerance)
	// missed counts the due times base + k×interval (k ≥ 1) inside the
	// window that come more than the tolerance before next: the next tick's
	// due time, or the window's end when no tick came after.
	missed := func(base, next int64) int64 {
		var n int64
		for v := base + iv; v+tol < next; v += iv {
			if in(v) {
				n++
			}
		}
		return n
	}
	// One tick per object is in flight at a time, so arrival order is the
	// order of each object's ticks.
	byObject := make([][]int, len(t.UIDs))
	for i, o := range t.Object {
		byObject[o] = append(byObject[o], i)
	}
	ws := &WindowStats{}
	seconds := make([][]int64, (to-from+int64(time.Second)-1)/int64(time.Second))
	var late, slips []int64
	var sum, gaps, gapSum float64
	perObject := map[int]int{}
	for o, ticks := range byObject {
		var prevDue, prevAck, prevArrival int64
		seen := false
		for _, i := range ticks {
			at, due, ack := t.Arrival[i], t.Scheduled[i], t.Ack[i]
			lateness := at - due
			if in(at) {
				ws.Arrived++
				sec := (at - from) / int64(time.Second)
				seconds[sec] = append(seconds[sec], lateness)
				if seen && in(prevArrival) {
					gaps++
					gapSum += float64(at - prevArrival)
				}
			}
			if seen && due == prevDue {
				// The same tick delivered again: the broker schedules the
				// next one after this ack.
				prevAck, prevArrival = ack, at
				continue
			}
			if seen {
				base := prevAck
				if sc.Sharp {
					base = prevDue
				}
				ws.Missed += missed(base, due)
				if !sc.Sharp && in(due) {
					slips = append(slips, due-prevAck-iv)
				}
			}
			if in(due) {
				ws.Delivered++
				late = append(late, lateness)
				sum += float64(lateness)
				ws.Phase[(due%iv)*10/iv]++
				perObject[o]++
			}
			prevDue, prevAck, prevArrival, seen = due, ack, at, true
		}
		if seen {
			base := prevAck
			if sc.Sharp {
				base = prevDue
			}
			ws.Missed += missed(base, to)
		}
	}
	ws.Expected = ws.Delivered + ws.Missed
	ws.Objects = len(perObject)
	for _, l := range seconds {
		st := SecondStats{Ticks: len(l)}
		if len(l) > 0 {
			slices.Sort(l)
			st.P50Ms, st.P99Ms, st.MaxMs = percentile(l, 0.5), percentile(l, 0.99), percentile(l, 1)
		}
		ws.PerSecond = append(ws.PerSecond, st)
	}
	s.InWindow = ws
	if gaps > 0 {
		ws.MeanPeriodMs = gapSum / gaps / 1e6
	}
	if len(slips) > 0 {
		slices.Sort(slips)
		ws.SlipP50Ms, ws.SlipP99Ms = percentile(slips, 0.5), percentile(slips, 0.99)
	}
	if len(late) == 0 {
		return s
	}
	slices.Sort(late)
	ws.P50Ms, ws.P90Ms, ws.P99Ms, ws.P999Ms = percentile(late, 0.50), percentile(late, 0.90), percentile(late, 0.99), percentile(late, 0.999)
	ws.MaxMs = float64(late[len(late)-1]) / 1e6
	ws.MeanMs = sum / float64(len(late)) / 1e6
	ws.MinPerObject = math.MaxInt
	for _, n := range perObject {
		ws.MinPerObject = min(ws.MinPerObject, n)
		ws.MaxPerObject = max(ws.MaxPerObject, n)
	}
	return s
}

// percentile returns the p-quantile (nearest rank) of sorted, in ms.
func percentile(sorted []int64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return float64(sorted[max(i, 0)]) / 1e6
}
