package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// pingIdle is how long the kit holds the session idle for conn.keepalive:
// with nothing sent to it, a handler that pings every second or more often
// pings four times in a row within it, and the proxy, as the broker, tells
// it GOAWAY (too_many_pings).
const pingIdle = 5 * time.Second

// tooManyPings is the debug data gRPC puts in the GOAWAY (code
// ENHANCE_YOUR_CALM) that closes a connection for its pings.
const tooManyPings = "too_many_pings"

// goaway is a GOAWAY the proxy's gRPC server sent the handler.
type goaway struct {
	peer  string // the handler's address
	at    time.Time
	code  http2.ErrCode
	debug string
}

// connKeepalive holds the session going on idle for pingIdle, then judges
// every GOAWAY the proxy, which enforces the broker's keepalive policy, sent
// the handler so far.
func (k *kit) connKeepalive(ctx context.Context) error {
	// Nothing to wait for but time, unless the handler is told GOAWAY.
	k.wire.await(ctx, pingIdle, func() bool { return pingedTooOften(k.wire.goaways) != nil })
	if err := ctx.Err(); err != nil {
		return err
	}
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	return pingedTooOften(k.wire.goaways)
}

// pingedTooOften fails when one of gs closed a connection for its pings.
func pingedTooOften(gs []goaway) error {
	for _, g := range gs {
		if g.code == http2.ErrCodeEnhanceYourCalm && g.debug == tooManyPings {
			return fmt.Errorf("the connection from %s was told GOAWAY (%s) at %s: its keepalive pings came more often than every 10s",
				g.peer, tooManyPings, g.at.Format("15:04:05.000"))
		}
	}
	return nil
}

// goawayListener accepts connections whose GOAWAY frames, as the proxy's
// gRPC server writes them, are passed to seen.
type goawayListener struct {
	net.Listener
	seen func(goaway)
}

func (l goawayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	peer := c.RemoteAddr().String()
	return &goawayConn{Conn: c, frames: frames{onGoaway: func(code http2.ErrCode, debug string) {
		l.seen(goaway{peer: peer, at: time.Now(), code: code, debug: debug})
	}}}, nil
}

// goawayConn reads the HTTP/2 frames the server writes on it.
type goawayConn struct {
	net.Conn
	frames frames
}

func (c *goawayConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.frames.feed(p[:n])
	return n, err
}

// frames splits a server's side of an HTTP/2 connection (which, unlike the
// client's, starts with a frame) into frames, keeping the payload of GOAWAY
// frames only.
type frames struct {
	mu       sync.Mutex
	head     []byte // the current frame's header, up to frameHeaderLen bytes
	left     int    // its payload bytes still to come
	payload  []byte // the payload so far, for a GOAWAY
	onGoaway func(code http2.ErrCode, debug string)
}

const frameHeaderLen = 9

func (f *frames) feed(p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(p) > 0 {
		if len(f.head) < frameHeaderLen {
			n := min(frameHeaderLen-len(f.head), len(p))
			f.head, p = append(f.head, p[:n]...), p[n:]
			if len(f.head) < frameHeaderLen {
				return
			}
			f.left, f.payload = int(f.head[0])<<16|int(f.head[1])<<8|int(f.head[2]), f.payload[:0]
		}
		n := min(f.left, len(p))
		if f.goawayLocked() {
			f.payload = append(f.payload, p[:n]...)
		}
		f.left, p = f.left-n, p[n:]
		if f.left == 0 {
			f.endFrameLocked()
		}
	}
}

func (f *frames) goawayLocked() bool { return http2.FrameType(f.head[3]) == http2.FrameGoAway }

// endFrameLocked reports a GOAWAY (last stream id, error code, debug data)
// and starts the next frame.
func (f *frames) endFrameLocked() {
	if f.goawayLocked() && len(f.payload) >= 8 {
		f.onGoaway(http2.ErrCode(binary.BigEndian.Uint32(f.payload[4:8])), string(f.payload[8:]))
	}
	f.head = f.head[:0]
}
