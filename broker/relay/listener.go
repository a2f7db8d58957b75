package relay

import (
	"net"
	"sync"
)

// connListener is a net.Listener whose connections are handed to it by the
// relay's accept loop: the HTTP server serves those accepted while the
// relay has a certificate, on the one port the relay listens on.
type connListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// hand gives conn to the server, or closes it once the listener is closed.
func (l *connListener) hand(conn net.Conn) {
	select {
	case l.conns <- conn:
	case <-l.closed:
		conn.Close()
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }
