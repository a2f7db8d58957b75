package sdk

// run starts c's function on an idle runner, or on a new runner when none
// is idle. A runner is a goroutine that runs one function after another
// until the session ends.
//
// A goroutine per delivery would start on a small stack and grow it, a
// copy, in nearly every delivery: checking and decoding the object need
// more than a new goroutine's stack. That was 6% of an ack-only handler's
// CPU at 10,000 ticks a second. A runner keeps the stack it grew.
//
// The serve loop never waits for a runner (a runner may be waiting to hand
// it a result), so a delivery that comes while every runner is busy or on
// its way back starts one more: there are at most about twice as many
// runners as the window, and idle ones cost their parked stacks.
func (s *session) run(c *call) {
	select {
	case s.idle <- c:
	default:
		s.workers.Add(1)
		go s.runner(c)
	}
}

func (s *session) runner(c *call) {
	defer s.workers.Done()
	for {
		s.work(c)
		select {
		case c = <-s.idle:
		case <-s.ctx.Done():
			return
		}
	}
}
