package sdk

import (
	"io"
	"log"
	"sync"

	"github.com/hashicorp/go-hclog"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// deliveryLogger is a delivery's logger, which names the delivery and its
// object, and the trace the delivery is part of when the broker sent one. It is made when something is first logged at a level the
// handler's logger writes: With copies the logger and its fields, and on
// every tick that cost an ack-only handler 7% of its CPU, though most
// deliveries log nothing.
type deliveryLogger struct {
	base hclog.Logger
	d    *tetherv1.Delivery

	once sync.Once
	l    hclog.Logger
}

var _ hclog.Logger = (*deliveryLogger)(nil)

func newDeliveryLogger(base hclog.Logger, d *tetherv1.Delivery) *deliveryLogger {
	return &deliveryLogger{base: base, d: d}
}

func (l *deliveryLogger) get() hclog.Logger {
	l.once.Do(func() {
		args := []any{"delivery", l.d.GetId(), "binding", l.d.GetBindingId(), "attempt", l.d.GetAttempt(),
			"namespace", l.d.GetRef().GetNamespace(), "name", l.d.GetRef().GetName()}
		if id := traceID(l.d); id != "" {
			args = append(args, "trace_id", id)
		}
		l.l = l.base.With(args...)
	})
	return l.l
}

func (l *deliveryLogger) Log(level hclog.Level, msg string, args ...any) {
	l.get().Log(level, msg, args...)
}

func (l *deliveryLogger) Trace(msg string, args ...any) {
	if l.base.IsTrace() {
		l.get().Trace(msg, args...)
	}
}

func (l *deliveryLogger) Debug(msg string, args ...any) {
	if l.base.IsDebug() {
		l.get().Debug(msg, args...)
	}
}

func (l *deliveryLogger) Info(msg string, args ...any)  { l.get().Info(msg, args...) }
func (l *deliveryLogger) Warn(msg string, args ...any)  { l.get().Warn(msg, args...) }
func (l *deliveryLogger) Error(msg string, args ...any) { l.get().Error(msg, args...) }

func (l *deliveryLogger) IsTrace() bool { return l.base.IsTrace() }
func (l *deliveryLogger) IsDebug() bool { return l.base.IsDebug() }
func (l *deliveryLogger) IsInfo() bool  { return l.base.IsInfo() }
func (l *deliveryLogger) IsWarn() bool  { return l.base.IsWarn() }
func (l *deliveryLogger) IsError() bool { return l.base.IsError() }

func (l *deliveryLogger) ImpliedArgs() []any                  { return l.get().ImpliedArgs() }
func (l *deliveryLogger) With(args ...any) hclog.Logger       { return l.get().With(args...) }
func (l *deliveryLogger) Name() string                        { return l.base.Name() }
func (l *deliveryLogger) Named(name string) hclog.Logger      { return l.get().Named(name) }
func (l *deliveryLogger) ResetNamed(name string) hclog.Logger { return l.get().ResetNamed(name) }
func (l *deliveryLogger) SetLevel(level hclog.Level)          { l.get().SetLevel(level) }
func (l *deliveryLogger) GetLevel() hclog.Level               { return l.base.GetLevel() }
func (l *deliveryLogger) StandardLogger(o *hclog.StandardLoggerOptions) *log.Logger {
	return l.get().StandardLogger(o)
}
func (l *deliveryLogger) StandardWriter(o *hclog.StandardLoggerOptions) io.Writer {
	return l.get().StandardWriter(o)
}
