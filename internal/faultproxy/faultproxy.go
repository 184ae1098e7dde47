// Package faultproxy is a loopback TCP proxy that injects network faults
// between a client and Redis: partitions, latency, connection resets and a
// permanent cut. The chaos suite and the benchmark use it; it needs no
// daemon and no dependency.
package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy is a loopback TCP proxy between a client and Redis that can hold
// all traffic (a partition: bytes wait, as TCP retransmission would deliver
// them after the heal), delay it (latency), reset every connection, or cut
// the client off for good (Close).
type Proxy struct {
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

// Start listens on 127.0.0.1:0 and forwards each connection to upstream.
func Start(upstream string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{l: l, upstream: upstream, stop: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

func (p *Proxy) accept() {
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

func (p *Proxy) serve(c net.Conn) {
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
func (p *Proxy) pipe(dst, src net.Conn) {
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
func (p *Proxy) gate(due time.Time) bool {
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

// Partition holds every byte in both directions until Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// Heal ends a partition and any latency; held bytes flow again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.delay = 0
}

// SetDelay delays every chunk read from now on by d.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Reset closes every open connection with a TCP RST.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines: the client is cut off for good. Safe to call twice.
func (p *Proxy) Close() {
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
