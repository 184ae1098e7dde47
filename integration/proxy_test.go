package integration

import (
	"context"

	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// netProxy is a loopback TCP proxy between one worker and Redis that can
// hold all traffic (a partition: bytes wait, as TCP retransmission would
// deliver them after the heal), delay it (latency) or reset every
// connection. It needs no dependency and no daemon.
type netProxy struct {
	l        net.Listener
	upstream string
	stop     chan struct{}
	wg       sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	held   chan struct{} // non-nil while partitioned; closed on heal
	delay  time.Duration
	closed bool
}

func startProxy(t *testing.T, upstream string) *netProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &netProxy{l: l, upstream: upstream, stop: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's listening address.
func (p *netProxy) Addr() string { return p.l.Addr().String() }

func (p *netProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *netProxy) serve(c net.Conn) {
	defer p.wg.Done()
	u, err := net.DialTimeout("tcp", p.upstream, time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_, _ = c.Close(), u.Close()
		return
	}
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(u, c) }()
	go func() { defer wg.Done(); p.pipe(c, u) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk no earlier than its due time and never
// while partitioned.
func (p *netProxy) pipe(dst, src net.Conn) {
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				due := time.Now().Add(p.delay)
				p.mu.Unlock()
				ch <- chunk{buf[:n], due}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		if !p.gate(c.due) {
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	_, _ = dst.Close(), src.Close()
	for range ch { // let the reader exit
	}
}

// gate waits until the proxy is not partitioned and due has passed; false
// when the proxy is closing.
func (p *netProxy) gate(due time.Time) bool {
	for {
		p.mu.Lock()
		held, closed := p.held, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if held != nil {
			select {
			case <-held:
			case <-p.stop:
			}
			continue
		}
		wait := time.Until(due)
		if wait <= 0 {
			return true
		}
		// The injected latency itself: hold this chunk until it is due.
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-p.stop:
			tm.Stop()
		}
	}
}

// partition holds every byte in both directions until heal.
func (p *netProxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// heal ends a partition and any latency; held bytes flow again.
func (p *netProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.delay = 0
}

// setDelay delays every chunk read from now on by d.
func (p *netProxy) setDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// reset closes every open connection with a TCP RST.
func (p *netProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

func (p *netProxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.stop)
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.l.Close()
	p.wg.Wait()
}

func TestProxyFaults(t *testing.T) {
	rds := startRedis(t)
	p := startProxy(t, rds.Addr())
	c := quickClient(t, p.Addr())
	ping := func(limit time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	require.NoError(t, ping(time.Second))

	p.partition()
	require.Error(t, ping(200*time.Millisecond), "partitioned")
	p.heal()
	require.NoError(t, ping(time.Second), "healed")

	p.setDelay(300 * time.Millisecond)
	require.Error(t, ping(200*time.Millisecond), "slower than the timeout")
	p.heal()
	require.NoError(t, ping(time.Second))

	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	buf := make([]byte, 16)
	_, err = raw.Read(buf)
	require.NoError(t, err)
	p.reset()
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(time.Second)))
	_, err = raw.Read(buf)
	require.Error(t, err, "reset closes the connection")
}
