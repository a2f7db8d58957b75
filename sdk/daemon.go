package sdk

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// daemonKey identifies a daemon: one per binding and object UID.
type daemonKey struct {
	binding, uid string
}

// daemon is one running daemon function. Its goroutine sets err and closes
// done when the function returns, then hands the daemon to the serve loop;
// the remaining fields belong to the serve loop.
type daemon struct {
	key    daemonKey
	ctx    context.Context
	cancel context.CancelCauseFunc
	log    hclog.Logger
	done   chan struct{}
	err    error // what the function returned; read after done
	// ev is the function's event: the patches and result it leaves there
	// go with its exit report.
	ev *Event

	stopping bool    // its context was cancelled on purpose
	stops    []*call // DAEMON_STOP deliveries acked when it returns
	// span is the function's, under the broker's span of the start, from
	// the start to the function's return.
	span trace.Span
}

// stop cancels the daemon's context, once.
func (dm *daemon) stop(cause error) {
	if dm.stopping {
		return
	}
	dm.stopping = true
	dm.cancel(cause)
}

// startDaemon handles DAEMON_START: the function starts in its own
// goroutine and the delivery is acked at once. The daemon holds no window
// slot while it runs.
func (s *session) startDaemon(d *tetherv1.Delivery, b *binding, log hclog.Logger, draining bool) {
	id, uid := d.GetId(), d.GetRef().GetUid()
	if uid == "" {
		log.Warn("daemon start without object uid")
		s.ack(failAck(id, "daemon start without object uid"))
		return
	}
	key := daemonKey{binding: b.id, uid: uid}
	if dm := s.daemons[key]; dm != nil {
		if dm.stopping {
			log.Warn("daemon start while the object's previous daemon is still stopping; asking the broker to retry")
			s.ack(retryAck(id, "the previous daemon of this object is still stopping"))
			return
		}
		log.Debug("daemon already running")
		s.ack(okAck(id))
		return
	}
	if draining {
		s.ack(retryAck(id, ErrShuttingDown.Error()))
		return
	}
	if s.full(id, log) {
		return
	}
	dlog := s.log.With("binding", b.id, "daemon", uid,
		"namespace", d.GetRef().GetNamespace(), "name", d.GetRef().GetName())
	if id := traceID(d); id != "" {
		dlog = dlog.With("trace_id", id) // the run's lines name its start's trace
	}
	ev, err := newEvent(d, DaemonStart, dlog)
	if err != nil {
		log.Error("malformed delivery", "error", err)
		s.ack(failAck(id, "malformed delivery: "+err.Error()))
		return
	}
	ev.Deadline = time.Time{} // the daemon outlives its start delivery
	ev.daemon = true
	ctx, cancel := context.WithCancelCause(s.ctx)
	ctx, span := s.h.traced(&call{d: d, b: b, kind: DaemonStart, ctx: ctx})
	dm := &daemon{key: key, ctx: ctx, cancel: cancel, log: dlog, done: make(chan struct{}), ev: ev, span: span}
	s.daemons[key] = dm
	go s.runDaemon(dm, b.fn, ev)
	dlog.Debug("daemon started", "delivery", id)
	s.ack(okAck(id))
}

func (s *session) runDaemon(dm *daemon, fn Func, ev *Event) {
	dm.err = callSafely(dm.ctx, fn, ev, dm.log)
	endDaemonSpan(dm)
	dm.cancel(context.Canceled) // no-op when stopped; frees the context otherwise
	close(dm.done)
	select {
	case s.exits <- dm:
	case <-s.ctx.Done():
	}
}

// stopDaemon handles DAEMON_STOP: the daemon's context is cancelled, and the
// delivery holds a window slot until the function has returned. It has no
// deadline on this side; the broker enforces the cancellation timeout.
func (s *session) stopDaemon(d *tetherv1.Delivery, b *binding, log hclog.Logger, draining bool) {
	id := d.GetId()
	dm := s.daemons[daemonKey{binding: b.id, uid: d.GetRef().GetUid()}]
	if dm == nil {
		log.Debug("daemon stop for a daemon not running")
		s.ack(okAck(id))
		return
	}
	// While draining the daemon is stopping anyway: the stop waits for it.
	if !draining && s.full(id, log) {
		return
	}
	ctx, cancel := context.WithCancelCause(s.ctx)
	c := &call{d: d, b: b, kind: DaemonStart, ctx: ctx, cancel: cancel, log: log,
		release: func() { cancel(context.Canceled) }}
	_, c.span = s.h.traced(c)
	s.inflight[id] = c
	dm.stops = append(dm.stops, c)
	dm.log.Debug("stopping daemon", "delivery", id)
	dm.stop(ErrDaemonStopped)
}

// daemonReturned is called by the serve loop when a daemon function has
// returned: it acks the stops waiting for it, or, when nobody asked it to
// stop, tells the broker it exited.
func (s *session) daemonReturned(dm *daemon) {
	if s.daemons[dm.key] != dm {
		return // left behind at the drain timeout
	}
	delete(s.daemons, dm.key)
	if dm.stopping {
		if dm.ev.wrote() {
			dm.log.Warn("the daemon was stopped: its patches and result are not written (only a daemon that returns by itself reports them)")
		}
		msg := ""
		if dm.err != nil && !stoppedByContext(dm) {
			msg = truncate(dm.err.Error())
			dm.log.Warn("daemon stopped with an error", "error", msg)
		} else {
			dm.log.Debug("daemon stopped")
		}
		for _, c := range dm.stops {
			id := c.d.GetId()
			if s.inflight[id] != c {
				continue // acked RETRY at the drain timeout
			}
			delete(s.inflight, id)
			c.release()
			ack := okAck(id)
			ack.Message = msg
			c.endSpan(ack)
			s.ack(ack)
		}
		return
	}
	exited := &tetherv1.DaemonExited{BindingId: dm.key.binding, Uid: dm.key.uid}
	carry(exited, dm)
	if dm.err != nil {
		exited.Failed, exited.Message = true, truncate(dm.err.Error())
		if _, _, after := classify(dm.err); after > 0 {
			exited.RetryAfter = durationpb.New(after) // RetryAfter's delay, for the restart
		}
		dm.log.Error("daemon returned by itself with an error", "error", exited.Message)
	} else {
		dm.log.Info("daemon returned by itself")
	}
	s.enqueue(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_DaemonExited{DaemonExited: exited}})
}

// carry puts what the daemon's run left on its event in its exit report,
// as an ack carries a function's; what cannot be sent is logged and left
// out.
func carry(exited *tetherv1.DaemonExited, dm *daemon) {
	var ack tetherv1.Ack
	if err := dm.ev.encode(&ack); err != nil {
		dm.log.Error("nothing of the daemon's run is written", "error", err)
		return
	}
	exited.Patch, exited.StatusPatch, exited.Result = ack.Patch, ack.StatusPatch, ack.Result
	if n := proto.Size(exited); n > tetherv1.DefaultMaxMessageBytes-maxAckMessage {
		dm.log.Error("nothing of the daemon's run is written: its patches and result are more than the broker takes in one message", "bytes", n)
		exited.Patch, exited.StatusPatch, exited.Result = nil, nil, nil
	}
}

// endDaemonSpan ends the span of the daemon's function, which returned:
// an error but the one that confirms a stop marks it failed.
func endDaemonSpan(dm *daemon) {
	if dm.err != nil && dm.span.IsRecording() && !stoppedByContext(dm) {
		dm.span.RecordError(dm.err)
		dm.span.SetStatus(codes.Error, dm.err.Error())
	}
	dm.span.End()
}

// stoppedByContext tells whether a stopped daemon's error only says that
// its context ended (ctx.Err() or context.Cause(ctx), possibly wrapped):
// that is how a daemon confirms it stopped, not a failure worth reporting.
func stoppedByContext(dm *daemon) bool {
	return errors.Is(dm.err, context.Canceled) || errors.Is(dm.err, context.Cause(dm.ctx))
}

// waitDaemons runs when the session is over: the session's context is
// cancelled, so every daemon is stopping. It waits for them up to the drain
// timeout and logs the ones that do not return; the broker starts them
// again after the next Welcome.
func (s *session) waitDaemons() {
	if len(s.daemons) == 0 {
		return
	}
	s.log.Info("session ended: waiting for daemons to stop", "daemons", len(s.daemons), "timeout", s.h.cfg.drainTimeout)
	timer := time.NewTimer(s.h.cfg.drainTimeout)
	defer timer.Stop()
	expired := false
	for key, dm := range s.daemons {
		if !expired {
			select {
			case <-dm.done:
			case <-timer.C:
				expired = true
			}
		}
		select {
		case <-dm.done:
		default:
			dm.log.Warn("daemon did not return within the drain timeout after the session ended; it ignores its context")
		}
		delete(s.daemons, key)
	}
}

func okAck(id string) *tetherv1.Ack {
	return &tetherv1.Ack{DeliveryId: id, Outcome: tetherv1.Outcome_OUTCOME_OK}
}
