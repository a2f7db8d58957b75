package timerstats

// Progress is the progress file, rewritten every second.
type Progress struct {
	Ticks   int64 `json:"ticks"`
	Objects int   `json:"objects"`
	// LastUnixNano is when the file was written.
	LastUnixNano int64 `json:"last_unix_nano"`
}

// Window is what the bench writes to -window-file before SIGTERM.
type Window struct {
	FromUnixNano int64 `json:"from_unix_nano"`
	ToUnixNano   int64 `json:"to_unix_nano"`
}

// Summary is what the Go handler writes to -summary on exit, and what the
// bench computes from a file of Ticks.
type Summary struct {
	Ticks   int64   `json:"ticks"`   // every tick received
	Objects int     `json:"objects"` // objects that had at least one tick
	Window  *Window `json:"window,omitempty"`
	// The ticks due inside the window; absent without a window.
	InWindow *WindowStats `json:"in_window,omitempty"`
}

// WindowStats describes the ticks due inside the window.
type WindowStats struct {
	// Expected is Delivered + Missed: the ticks the timers' schedules made
	// due inside the window.
	Expected int64 `json:"expected"`
	// Delivered ticks were due inside the window and arrived, possibly
	// after its end.
	Delivered int64 `json:"delivered"`
	// Missed ticks were due inside the window and never arrived.
	Missed int64 `json:"missed"`
	// Arrived counts the ticks that arrived inside the window, whatever
	// their due time: the count a grid of one tick per interval is
	// compared with.
	Arrived int64 `json:"arrived"`
	Objects int   `json:"objects"` // objects with at least one tick due in the window
	// MinPerObject and MaxPerObject are the fewest and most delivered
	// ticks one of those objects had.
	MinPerObject int `json:"min_per_object"`
	MaxPerObject int `json:"max_per_object"`
	// Lateness of the delivered ticks: arrival − Event.Scheduled.
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
	// MeanPeriodMs is the mean time between the arrivals of two
	// consecutive ticks of one object, both inside the window.
	MeanPeriodMs float64 `json:"mean_period_ms"`
	// SlipP50Ms and SlipP99Ms (timers that tick after each ack): how much
	// later than (the handler's ack + interval) the next tick was due, for
	// the delivered ticks. It is the ack's way back to the broker, which
	// lateness does not see.
	SlipP50Ms float64 `json:"slip_p50_ms"`
	SlipP99Ms float64 `json:"slip_p99_ms"`
	// PerSecond breaks the window down by arrival second, to tell steady
	// lateness from bursts.
	PerSecond []SecondStats `json:"per_second"`
	// Phase counts the ticks by when they were due within the interval
	// (Scheduled modulo the interval, in tenths): all in one tenth means the
	// objects tick in step, one burst per interval.
	Phase [10]int64 `json:"phase"`
}

// SecondStats is one second of the window.
type SecondStats struct {
	Ticks int     `json:"ticks"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}
