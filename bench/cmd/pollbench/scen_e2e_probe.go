package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pollworker/pollworker/httppoll"
)

// The instruments of the e2e scenario: the HTTP target every poller GETs
// (it logs each arrival and counts its open connections), a TCP proxy in
// front of redis-server that counts round trips, and readers of /proc.

// arrival is one request at the target.
type arrival struct {
	at      time.Duration // since the target started (monotonic)
	session string
	worker  string
}

// e2eTarget is a local HTTP server that answers 200 "ok" and logs every
// request's session and worker (the X-Poll-Session and X-Poll-Worker
// headers, sent by httppoll and by the limit loop alike).
type e2eTarget struct {
	srv   *http.Server
	ln    net.Listener
	start time.Time
	done  chan struct{}

	mu  sync.Mutex
	log []arrival

	conns, peak atomic.Int64
}

func startTarget() (*e2eTarget, error) { return startHoldingTarget(0) }

// startHoldingTarget starts an e2eTarget that holds each request for hold
// before it answers (the overload scenario's slow target).
func startHoldingTarget(hold time.Duration) (*e2eTarget, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &e2eTarget{ln: ln, start: time.Now(), done: make(chan struct{})}
	body := []byte("ok\n")
	t.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a := arrival{at: time.Since(t.start), session: r.Header.Get(httppoll.HeaderSession), worker: r.Header.Get(httppoll.HeaderWorker)}
			t.mu.Lock()
			t.log = append(t.log, a)
			t.mu.Unlock()
			if hold > 0 {
				select {
				case <-time.After(hold):
				case <-r.Context().Done():
				}
			}
			_, _ = w.Write(body)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				n := t.conns.Add(1)
				for p := t.peak.Load(); n > p && !t.peak.CompareAndSwap(p, n); p = t.peak.Load() {
				}
			case http.StateClosed, http.StateHijacked:
				t.conns.Add(-1)
			}
		},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { defer close(t.done); _ = t.srv.Serve(ln) }()
	return t, nil
}

// urlPrefix is the URL of session id without the id.
func (t *e2eTarget) urlPrefix() string { return "http://" + t.ln.Addr().String() + "/s/" }

// now is the target's clock.
func (t *e2eTarget) now() time.Duration { return time.Since(t.start) }

// since returns the arrivals from mark on.
func (t *e2eTarget) since(mark time.Duration) []arrival {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.log), func(i int) bool { return t.log[i].at >= mark })
	return append([]arrival(nil), t.log[i:]...)
}

// clear forgets the arrivals logged so far.
func (t *e2eTarget) clear() {
	t.mu.Lock()
	t.log = nil
	t.mu.Unlock()
}

// resetPeak starts a new peak of open connections from the current count.
func (t *e2eTarget) resetPeak() { t.peak.Store(t.conns.Load()) }

// polled returns how many distinct sessions worker (any, if "") polled
// from mark on.
func (t *e2eTarget) polled(mark time.Duration, worker string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[string]bool{}
	i := sort.Search(len(t.log), func(i int) bool { return t.log[i].at >= mark })
	for _, a := range t.log[i:] {
		if worker == "" || a.worker == worker {
			seen[a.session] = true
		}
	}
	return len(seen)
}

// arrivals returns how many requests worker made in [from, to).
func (t *e2eTarget) arrivals(from, to time.Duration, worker string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.log), func(i int) bool { return t.log[i].at >= from })
	n := 0
	for _, a := range t.log[i:] {
		if a.at >= to {
			break
		}
		if a.worker == worker {
			n++
		}
	}
	return n
}

func (t *e2eTarget) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = t.srv.Shutdown(ctx)
	_ = t.srv.Close()
	<-t.done
}

// arrivalStats are the figures of a window of arrivals.
type arrivalStats struct {
	polls        int
	perSec       float64
	busiestSlot  float64 // arrivals in the busiest 10 ms slot / mean per slot
	lateP99      float64 // ms, against each session's steady grid
	lateFirstP99 float64 // ms, against the grid of each session's very first poll
}

// analyze computes the figures of the arrivals in [from, to) of all (the
// run's log, from its start). Lateness is against each session's grid: a
// poll of it + k × interval, k the nearest whole number; lateP99 takes
// its first poll at or after anchor (steady state), lateFirstP99 its
// first poll of the run.
func analyze(all []arrival, anchor, from, to time.Duration, interval time.Duration) arrivalStats {
	first, steady := map[string]time.Duration{}, map[string]time.Duration{}
	for _, a := range all {
		if _, ok := first[a.session]; !ok {
			first[a.session] = a.at
		}
		if _, ok := steady[a.session]; !ok && a.at >= anchor {
			steady[a.session] = a.at
		}
	}
	lateness := func(at, grid time.Duration) float64 {
		d := at - grid
		k := math.Round(float64(d) / float64(interval))
		return float64(d-time.Duration(k)*interval) / float64(time.Millisecond)
	}
	const slot = 10 * time.Millisecond
	slots := make([]int, int((to-from+slot-1)/slot))
	var late, lateFirst []float64
	st := arrivalStats{}
	for _, a := range all {
		if a.at < from || a.at >= to {
			continue
		}
		st.polls++
		slots[int((a.at-from)/slot)]++
		late = append(late, lateness(a.at, steady[a.session]))
		lateFirst = append(lateFirst, lateness(a.at, first[a.session]))
	}
	st.perSec = float64(st.polls) / (to - from).Seconds()
	busiest := 0
	for _, n := range slots {
		busiest = max(busiest, n)
	}
	if st.polls > 0 {
		st.busiestSlot = float64(busiest) / (float64(st.polls) / float64(len(slots)))
	}
	sort.Float64s(late)
	sort.Float64s(lateFirst)
	st.lateP99, st.lateFirstP99 = percentile(late, 99), percentile(lateFirst, 99)
	return st
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	r := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(r, len(sorted)-1))]
}

// rtProxy is a loopback TCP proxy in front of redis-server that counts
// round trips: on each connection, a burst of bytes from the client that
// follows bytes from the server (or opens the connection) is one round
// trip, however many commands it pipelines. A pipeline the server starts
// answering before the client has finished sending it counts more than
// once (an overcount, never an undercount).
type rtProxy struct {
	ln       net.Listener
	upstream string
	rts      atomic.Int64
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startRTProxy(upstream string) (*rtProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &rtProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go p.serve(c)
		}
	}()
	return p, nil
}

func (p *rtProxy) addr() string { return p.ln.Addr().String() }

// roundTrips is the number of round trips so far.
func (p *rtProxy) roundTrips() int64 { return p.rts.Load() }

func (p *rtProxy) serve(c net.Conn) {
	defer p.wg.Done()
	u, err := net.DialTimeout("tcp", p.upstream, time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var answered atomic.Bool
	answered.Store(true)
	done := make(chan struct{})
	go func() { // server → client
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := u.Read(buf)
			if n > 0 {
				answered.Store(true)
				if _, werr := c.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_, _ = c.Close(), u.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if answered.Swap(false) {
				p.rts.Add(1)
			}
			if _, werr := u.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_, _ = c.Close(), u.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

func (p *rtProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// procCPU returns a process's user + system CPU time from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: the fields follow its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no ')'")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("proc stat: short")
	}
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck, nil
}

// machineBusy returns the CPU time every core of the machine spent not
// idle (/proc/stat: all but idle and iowait).
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest time is counted in user already
			busy += n
		}
	}
	const clkTck = 100
	return time.Duration(busy) * time.Second / clkTck
}

// procMem returns VmRSS and VmHWM of a process, in bytes.
func procMem(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm, sc.Err()
}

// scrapeMetrics reads a worker's /metrics into name{labels} → value.
func scrapeMetrics(ctx context.Context, addr string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, nil
}

// sumMetric adds every series of name whose labels contain each of labels
// (written as `key="value"`).
func sumMetric(m map[string]float64, name string, labels ...string) float64 {
	var s float64
	for k, v := range m {
		base, lab, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(lab, l)
		}
		if ok {
			s += v
		}
	}
	return s
}
