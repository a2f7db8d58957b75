package dispatch

import (
	"errors"
	"fmt"
)

// ErrConnected refuses to forget a handler that has instances connected.
var ErrConnected = errors.New("the handler has instances connected")

// Forget stops the handler's controller and forgets it, so that nothing adds
// its holds back, writes its Lease or keeps its webhooks while `broker
// release --handler` releases it with the broker running. A handler with
// instances connected is not forgotten (ErrConnected); one not known is
// nothing to do. The handler comes back when an instance connects.
func (m *Manager) Forget(handler string) error {
	m.mu.Lock()
	rt := m.controllers[handler]
	if rt != nil && rt.pool.len() > 0 {
		n := rt.pool.len()
		m.mu.Unlock()
		return fmt.Errorf("forgetting handler %s: %w (%d)", handler, ErrConnected, n)
	}
	delete(m.controllers, handler)
	m.mu.Unlock()
	if rt != nil {
		rt.stop()
		m.opts.Metrics.Presence().Present(handler, false)
		m.log.Info("handler forgotten on request", "handler", handler)
	}
	return nil
}
