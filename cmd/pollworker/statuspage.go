package main

import (
	"context"
	"html/template"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/internal/ring"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/poller"
)

// recentEvents keeps the last lease events of this worker for the status
// page, in a ring: a drain or a takeover reports thousands of events at
// once, and each add is O(1) without allocating.
type recentEvents struct {
	mu     sync.Mutex
	events *ring.Ring[poller.Event]
}

func newRecentEvents(max int) *recentEvents {
	return &recentEvents{events: ring.New[poller.Event](max)}
}

// add records e; it never blocks for long (poller.Observer.LeaseEvent).
func (r *recentEvents) add(e poller.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events.Push(e)
}

// pageObserver is the worker's poller.Observer: its metrics, and each lease
// event recorded for the status page too.
type pageObserver struct {
	poller.Observer // the metrics
	events          *recentEvents
}

// LeaseEvent counts e in the metrics and keeps it for the status page.
func (o pageObserver) LeaseEvent(e poller.Event) {
	o.Observer.LeaseEvent(e)
	o.events.add(e)
}

// list returns the events kept, newest first.
func (r *recentEvents) list() []poller.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events.Newest(make([]poller.Event, 0, r.events.Len()))
}

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"ms":    func(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() },
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05.000 MST") },
	"stamp": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>pollworker {{.Self}}</title>
<style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:.3em .7em;text-align:left}.err{color:#b00}
figure.chart{margin:0}figcaption{font-size:12px;color:#444}</style></head>
<body>
<h1>pollworker</h1>
<p>This worker: <b id="self">{{.Self}}</b>, {{if .Ready}}<span id="ready">ready</span>{{else}}<span id="ready" class="err">not ready</span>{{end}}{{if .Behind}}, <span id="behind" class="err">behind: it cannot keep up with its share: {{.Behind}}</span>{{end}}.</p>
{{if .Err}}<p class="err" id="error">Redis: {{.Err}}</p>{{else}}
{{with .Charts}}<h2>The last 15 minutes</h2>
<div id="charts" style="display:flex;flex-wrap:wrap;gap:1em">{{.Polls}}{{.Late}}{{.Failures}}{{.Held}}{{.Placement}}</div>{{end}}
{{if .ChartsErr}}<p class="err" id="charts-error">charts: {{.ChartsErr}}</p>{{end}}
<h2>Live workers ({{len .Status.Nodes}})</h2>
<table id="nodes"><tr><th>id</th><th>host</th><th>version</th><th>incarnation</th><th>weight</th><th>labels</th><th>leases</th><th>polls/s</th><th>last heartbeat</th><th>expires in</th></tr>
{{range .Status.Nodes}}<tr class="node"><td>{{.ID}}{{if .Cordoned}} <b class="err cordoned">cordoned</b>{{end}}</td><td>{{.Host}}</td><td>{{.Version}}</td><td>{{.Incarnation}}</td><td>{{.Weight}}</td><td class="labels">{{range $k, $v := .Labels}}{{$k}}={{$v}} {{end}}</td><td>{{.Leases}}</td><td>{{printf "%.2f" .PollsPerSecond}}</td><td>{{if ge .HeartbeatAgeMs 0}}{{ms .HeartbeatAgeMs}} ago{{end}}</td><td>{{ms .ExpiresInMs}}</td></tr>
{{end}}</table>
<p>Sessions: {{.Status.Sessions.Active}} active, {{.Status.Sessions.Paused}} paused, {{.Status.Sessions.Malformed}} malformed.
Unowned: <b id="unowned">{{.Status.Leases.Unowned}}</b>{{range .Status.UnownedSample}} {{.}}{{end}}.
Held by a holder not polling them: <b id="not-polled" {{if .Status.NotPolledSample}}class="err"{{end}}>{{.Status.Leases.ByPrevious}} by previous incarnations, {{.Status.Leases.ByOthers}} by workers not live</b>{{range .Status.NotPolledSample}} {{.}}{{end}}.
Balance (max/mean): {{printf "%.2f" .Status.Balance.MaxOverMean}} of leases, {{printf "%.2f" .Status.PollBalance}} of polls per second per unit of weight.</p>
<p>No matching worker (a selector no live worker's labels match; polled by nobody): <b id="unplaceable" {{if .Status.Unplaceable.Count}}class="err"{{end}}>{{.Status.Unplaceable.Count}}</b>{{range $sel, $n := .Status.Unplaceable.BySelector}} [{{$sel}}: {{$n}}]{{end}}{{range .Status.Unplaceable.Sample}} {{.}}{{end}}.</p>
{{if .Status.OtherHolders}}<table id="other-holders"><tr><th>holder not polling</th><th>incarnation</th><th>why</th><th>leases</th><th>expire within</th></tr>
{{range .Status.OtherHolders}}<tr><td>{{.ID}}</td><td>{{.Incarnation}}</td><td>{{if .Previous}}previous incarnation of a live id{{else}}not live{{end}}</td><td>{{.Leases}}</td><td>{{ms .ExpiresInMs}}</td></tr>
{{end}}</table>{{end}}
{{with .Status.UnknownLeases}}{{if .Scanned}}<p>Leases of sessions not in the store (SCAN at {{clock .At}}): <b id="unknown-leases">{{.Count}}</b>{{range .Lease}} {{.Session}} by {{.Holder}}{{end}}.</p>{{end}}{{end}}
{{end}}
{{if .FailingShown}}<h2>Failing sessions {{if .FailingFleet}}of the fleet{{else}}polled by this worker{{end}} ({{.FailingCount}})</h2>
{{if .Failing}}<table id="failing"><tr>{{if $.FailingFleet}}<th>worker</th>{{end}}<th>session</th><th>failures in a row</th><th>last status</th><th>message</th><th>failing since</th><th>last poll</th><th>token</th></tr>
{{range .Failing}}<tr class="failing">{{if $.FailingFleet}}<td>{{.Worker}}</td>{{end}}<td>{{.Session}}</td><td>{{.Failures}}</td><td>{{if .Status}}{{.Status}}{{else}}{{.Error}}{{end}}</td><td class="message">{{.Message}}</td><td>{{stamp .Since}}</td><td>{{stamp .LastPoll}}</td><td>{{.Token}}</td></tr>
{{end}}</table>{{if gt .FailingMore 0}}<p>… and {{.FailingMore}} more (<code>pollworker sessions list --wide</code>).</p>{{end}}{{else}}<p id="failing-none">None: every session's last poll succeeded.</p>{{end}}{{end}}
<h2>Recent lease events of this worker</h2>
<table id="events"><tr><th>time</th><th>event</th><th>session</th><th>token</th><th>reason</th></tr>
{{range .Events}}<tr><td>{{clock .At}}</td><td>{{.Type}}</td><td>{{.Session}}</td><td>{{.Token}}</td><td>{{.Reason}}</td></tr>
{{end}}</table>
</body></html>
`))

// pageScanEvery is how long the status page reuses one SCAN for leases of
// unknown sessions: the page reloads every 5 s, and a SCAN is a pass over
// the whole keyspace.
const pageScanEvery = time.Minute

// pageCensusEvery is how long the status page reuses one census of the
// sessions and their leases (fleet.Reader.ReadAll: every session, every
// lease): the page reloads every 5 s, and each worker serves one, so
// concurrent and repeated loads within it cost the bounded read of the
// members alone (fleet.Reader.ReadFleet: three round trips, whatever the
// number of sessions).
const pageCensusEvery = 5 * time.Second

// pageReader reads the status page's status: the live workers on every
// load, the sessions and leases at most once per pageCensusEvery, and the
// SCAN for leases of unknown sessions at most once per pageScanEvery.
type pageReader struct {
	client redis.UniversalClient
	keys   keyspace.Space

	mu       sync.Mutex
	reader   *fleet.Reader
	census   clusterStatus // the last census
	censusAt time.Time     // when it was read; zero: never
	scanned  unknownLeases // the last SCAN's result
	scanAt   time.Time     // when it ran, or was refused or failed; zero: never
	// now is the clock the reuse is timed by; nil: time.Now.
	now func() time.Time
}

func (p *pageReader) read(ctx context.Context) (clusterStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now
	if p.now != nil {
		now = p.now
	}
	if p.reader == nil {
		r, err := fleet.NewReader(p.client, p.keys, fleetOptions(poller.DefaultLeaseTTL))
		if err != nil {
			return clusterStatus{}, err
		}
		p.reader = r
	}
	if !p.censusAt.IsZero() && now().Sub(p.censusAt) < pageCensusEvery {
		snap, err := p.reader.ReadFleet(ctx)
		if err != nil {
			return clusterStatus{}, err
		}
		return withNodes(p.census, snap), nil
	}
	snap, err := p.reader.ReadAll(ctx)
	if err != nil {
		return clusterStatus{}, err
	}
	st := buildStatus(snap)
	if p.scanAt.IsZero() || now().Sub(p.scanAt) >= pageScanEvery {
		p.scanned, p.scanAt = findUnknownLeases(ctx, p.reader, snap), now()
	}
	st.UnknownLeases = p.scanned
	p.census, p.censusAt = st, now()
	return st, nil
}

// pageFailingMax is how many failing sessions the status page lists.
const pageFailingMax = 100

// statusPageHandler serves the read-only status page at /: the deployment
// as computeStatus reads it, and this worker's recent lease events. The
// worker is shown ready only when ready() is true and the page's own read
// of Redis succeeded.
func statusPageHandler(self string, ready func() bool, read func(ctx context.Context) (clusterStatus, error), events *recentEvents) http.Handler {
	return statusPageConfig{self: self, ready: ready, read: read, events: events}.handler()
}

// statusPageConfig is what the status page shows: statusPageHandler's
// arguments, and failing, if set, the sessions this worker polls whose
// last poll failed (the failing table, told by the HTTP poller: memory only), and
// behind, if set, why this worker is behind, "" when it keeps up
// (poller.PollStats.Overload).
type statusPageConfig struct {
	self    string
	ready   func() bool
	read    func(ctx context.Context) (clusterStatus, error)
	events  *recentEvents
	failing func() []failingSession
	// fleetFailing, if set, reads the failing sessions of the whole fleet
	// (readFleetFailing) and how many there are: the table shows them,
	// and this worker's own (failing) only when that read fails.
	fleetFailing func(ctx context.Context, st clusterStatus) ([]failingSession, int, error)
	behind       func() string
	// charts, if set, draws the live workers' timelines (readCharts).
	charts func(ctx context.Context, st clusterStatus) (pageCharts, error)
}

func (c statusPageConfig) handler() http.Handler {
	self, ready, read, events := c.self, c.ready, c.read, c.events
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		st, err := read(ctx)
		data := struct {
			Self         string
			Ready        bool
			Behind       string
			Status       clusterStatus
			Err          error
			Events       []poller.Event
			FailingShown bool
			FailingFleet bool
			Failing      []failingSession
			FailingMore  int
			FailingCount int
			Charts       *pageCharts
			ChartsErr    error
		}{Self: self, Status: st, Err: err, Events: events.list(), FailingShown: c.failing != nil || c.fleetFailing != nil}
		if c.charts != nil && err == nil {
			pc, cerr := c.charts(ctx, st)
			if cerr == nil {
				data.Charts = &pc
			}
			data.ChartsErr = cerr
		}
		data.Failing, data.FailingCount, data.FailingFleet = c.failingRows(ctx, st, err)
		if n := len(data.Failing); n > pageFailingMax {
			data.Failing = data.Failing[:pageFailingMax]
		}
		data.FailingMore = data.FailingCount - len(data.Failing)
		// A page that could not read Redis does not call the worker ready
		// right above the error; /readyz (the same ready func) agrees
		// within its PING's second.
		data.Ready = err == nil && ready()
		if c.behind != nil {
			data.Behind = c.behind()
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = statusPage.Execute(w, data)
	})
}

// failingRows returns the failing table's rows and how many sessions fail
// in all: the whole fleet's when fleetFailing is set and the page read
// the live workers (readErr nil) and their lists — this worker's own from
// memory (failing), as fresh as its last poll, the others' as published
// at most a timeline step ago —, else this worker's alone.
func (c statusPageConfig) failingRows(ctx context.Context, st clusterStatus, readErr error) (rows []failingSession, total int, fleet bool) {
	var own []failingSession
	if c.failing != nil {
		own = c.failing()
	}
	if c.fleetFailing != nil && readErr == nil {
		if others, n, err := c.fleetFailing(ctx, st); err == nil {
			for _, f := range own {
				f.Worker = c.self
				others = append(others, f)
			}
			slices.SortFunc(others, byFailingSince)
			return others, n + len(own), true
		}
	}
	return own, len(own), false
}
