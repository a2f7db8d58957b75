package main

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// A client that pings every 50 ms is told GOAWAY (too_many_pings) by the
// proxy's gRPC server, as by the broker's, and the kit fails conn.keepalive.
func TestConnKeepaliveFailsAClientThatPingsTooOften(t *testing.T) {
	w, err := newWire("127.0.0.1:1", false) // no broker: the client opens no stream
	if err != nil {
		t.Fatal(err)
	}
	defer w.stop()
	c, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go func() { // the server's frames, until it closes the connection
		for {
			if _, err := fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			if fr.WritePing(false, [8]byte{1}) != nil {
				return
			}
			<-tick.C
		}
	}()
	if !w.await(ctx, 10*time.Second, func() bool { return pingedTooOften(w.goaways) != nil }) {
		t.Fatalf("no GOAWAY (too_many_pings) recorded; recorded %v", w.goaways)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Log(pingedTooOften(w.goaways))
	if w.goaways[0].peer != c.LocalAddr().String() {
		t.Errorf("the GOAWAY names %s, not the client %s", w.goaways[0].peer, c.LocalAddr())
	}
}

func TestPingedTooOftenJudgesOnlyTooManyPings(t *testing.T) {
	stopped := goaway{code: http2.ErrCodeNo}
	if err := pingedTooOften([]goaway{stopped}); err != nil {
		t.Errorf("a GOAWAY without an error failed: %v", err)
	}
	if pingedTooOften([]goaway{stopped, {code: http2.ErrCodeEnhanceYourCalm, debug: tooManyPings}}) == nil {
		t.Error("a GOAWAY (too_many_pings) passed")
	}
}

// The frames are found wherever the writes split them.
func TestFramesFindAGoawaySplitAcrossWrites(t *testing.T) {
	var got []string
	f := frames{onGoaway: func(code http2.ErrCode, debug string) { got = append(got, code.String()+" "+debug) }}
	settings := []byte{0, 0, 0, byte(http2.FrameSettings), 0, 0, 0, 0, 0}
	ping := append([]byte{0, 0, 8, byte(http2.FramePing), 1, 0, 0, 0, 0}, make([]byte, 8)...)
	payload := append([]byte{0, 0, 0, 0, 0, 0, 0, byte(http2.ErrCodeEnhanceYourCalm)}, tooManyPings...)
	away := append([]byte{0, 0, byte(len(payload)), byte(http2.FrameGoAway), 0, 0, 0, 0, 0}, payload...)
	all := append(append(append([]byte{}, settings...), ping...), away...)
	for _, split := range []int{1, 3, 9, 10, 17, len(all)} {
		got = nil
		for i := 0; i < len(all); i += split {
			f.feed(all[i:min(i+split, len(all))])
		}
		if len(got) != 1 || got[0] != "ENHANCE_YOUR_CALM "+tooManyPings {
			t.Errorf("written %d bytes at a time: GOAWAYs %q", split, got)
		}
	}
}
