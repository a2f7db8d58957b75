package relay

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// link is one relayed connection: the client's and the broker's, copied
// both ways.
type link struct {
	client, upstream net.Conn
	local            bool // upstream is the local broker, not a peer
	clock            clock.PassiveClock
	last             atomic.Int64 // when a byte last went either way, in Unix nanoseconds
	upDone           atomic.Bool  // nothing more comes from upstream
	once             sync.Once
}

func newLink(client, upstream net.Conn, local bool, c clock.PassiveClock) *link {
	l := &link{client: client, upstream: upstream, local: local, clock: c}
	l.touch()
	return l
}

func (l *link) touch() { l.last.Store(l.clock.Now().UnixNano()) }

func (l *link) lastActive() time.Time { return time.Unix(0, l.last.Load()) }

func (l *link) upstreamEnded() bool { return l.upDone.Load() }

// run copies both ways until both are done, then closes both connections.
func (l *link) run() {
	done := make(chan struct{})
	go func() {
		l.copy(l.upstream, l.client)
		close(done)
	}()
	l.copy(l.client, l.upstream)
	l.upDone.Store(true)
	<-done
	l.close()
}

// copy copies src to dst. At src's end (EOF) it ends dst's writing side
// only, so a side that half-closed still gets its answer; on an error
// either way (a reset, a process gone) it closes both, which ends the
// other direction too.
func (l *link) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			l.touch()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				l.close()
				return
			}
		}
		if errors.Is(err, io.EOF) {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				return
			}
			l.close()
			return
		}
		if err != nil {
			l.close()
			return
		}
	}
}

func (l *link) close() {
	l.once.Do(func() {
		l.client.Close()
		l.upstream.Close()
	})
}
