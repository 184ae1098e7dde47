package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// stateChunk is how many sessions' states sessions list --wide loads per
// state.Store.LoadMany call.
const stateChunk = 1000

func sessionsGetCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "show one session: its definition, its lease and the HTTP poller's saved state",
		ArgsUsage: "ID",
		Description: "Shows the definition, who holds the lease now, and the state the HTTP poller saved for the\n" +
			"session: last status (or error class), latency, last success, consecutive failures and\n" +
			"since when, last change, ETag, Last-Modified, body hash, backoff, and the worker and\n" +
			"fencing token that saved it. The state is saved when one of these changes, else at most\n" +
			"once a minute: last success and latency may be up to a minute old. Times are in UTC.",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return usageError(errors.New("sessions get: give one session id"))
			}
			id := cmd.Args().First()
			if err := keyspace.ValidateID(id); err != nil {
				return usageError(fmt.Errorf("sessions get: invalid session id %s", idProblemOf(id)))
			}
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				v, err := readSessionView(ctx, a, id)
				if err != nil {
					return err
				}
				if cmd.Bool("json") {
					enc := json.NewEncoder(cmd.Root().Writer)
					enc.SetIndent("", "  ")
					return enc.Encode(v)
				}
				printSessionView(cmd.Root().Writer, v)
				return nil
			})
		}),
	}
}

// sessionView is what sessions get shows (and prints as JSON).
type sessionView struct {
	Session listedSession `json:"session"`
	// Lease is the current holder of the session's lease; nil when free.
	Lease *leaseView `json:"lease"`
	// BadKey is a key of the session the workers cannot use, nil if none.
	BadKey *lease.BadKey `json:"bad_key,omitempty"`
	// State is the saved state; nil when none was saved.
	State *stateView `json:"state"`
	// Slots are a scheduled session's next and last slots; nil for one
	// polled on an interval.
	Slots *slotsView `json:"slots,omitempty"`
	now   time.Time
}

// leaseView is who holds a lease now.
type leaseView struct {
	Holder      string `json:"holder"`
	Incarnation string `json:"incarnation"`
	ExpiresInMs int64  `json:"expires_in_ms"`
}

// stateView is a saved state record and, when it is the HTTP poller's,
// what it says.
type stateView struct {
	// Token is the fencing token of the lease that saved it.
	Token int64 `json:"token"`
	// Saved is when it was saved, on the Redis server's clock.
	Saved time.Time `json:"saved"`
	// Bytes is the size of the saved data.
	Bytes int `json:"bytes"`
	// HTTP is the HTTP poller's state; nil when the data is not one
	// (Problem says why, and Raw is the data: another poller's state).
	HTTP    *httppoll.State `json:"http"`
	Problem string          `json:"problem,omitempty"`
	Raw     []byte          `json:"raw,omitempty"`
	// Corrupt says why the stored state is unreadable (state.Record.Corrupt):
	// the workers poll the session as never saved.
	Corrupt string `json:"corrupt,omitempty"`
	// now is the Redis server's time of the read, for ages.
	now time.Time
}

// listedOf is s as listed, its URL's password hidden.
func listedOf(s session.Session) listedSession {
	l := listedSession{ID: s.ID, URL: redactURL(s.URL), Paused: s.Paused, Labels: s.Labels, Selector: s.Selector,
		Method: s.MethodOrGet(), Headers: s.Headers, Body: s.Body, Expect: s.ExpectOrDefault(), Profile: s.Profile, scheduleView: scheduleViewOf(s)}
	if !s.Scheduled() {
		l.Interval = s.Interval.D().String()
	}
	if s.Timeout != 0 {
		l.Timeout = s.Timeout.D().String()
	}
	return l
}

// newStateView reads rec; nil when nothing was saved.
func newStateView(rec state.Record) *stateView {
	if rec.Corrupt != "" {
		return &stateView{Corrupt: rec.Corrupt, now: rec.Read}
	}
	if rec.Token == 0 && rec.Data == nil {
		return nil
	}
	v := &stateView{Token: rec.Token, Saved: rec.Saved.UTC(), Bytes: len(rec.Data), now: rec.Read}
	if v.now.IsZero() {
		v.now = time.Now()
	}
	if st, err := httppoll.DecodeState(rec.Data); err != nil {
		v.Problem, v.Raw = err.Error(), rec.Data
	} else {
		v.HTTP = &st
	}
	return v
}

// rawTextMax is how many bytes of another poller's state sessions get
// prints.
const rawTextMax = 512

// rawText is data as sessions get prints another poller's state: quoted
// (Go escapes for what is not printable), its first rawTextMax bytes.
func rawText(data []byte) string {
	if len(data) > rawTextMax {
		return strconv.Quote(string(data[:rawTextMax])) + fmt.Sprintf(" … (%d bytes in all)", len(data))
	}
	return strconv.Quote(string(data))
}

// readSessionView reads session id's definition, lease and state.
func readSessionView(ctx context.Context, a admin, id string) (sessionView, error) {
	s, err := a.store.Get(ctx, id)
	switch {
	case errors.Is(err, session.ErrNotFound):
		return sessionView{}, fmt.Errorf("session %s not found", id)
	case err != nil:
		return sessionView{}, err
	}
	v := sessionView{Session: listedOf(s)}
	holdings, err := lease.NewReader(a.client, a.keys, 0).Inspect(ctx, []string{id})
	if err != nil {
		return sessionView{}, err
	}
	if h := holdings[0]; h.Owner != "" {
		o := lease.ParseOwner(h.Owner)
		v.Lease = &leaseView{Holder: o.Holder, Incarnation: o.Incarnation, ExpiresInMs: h.Remaining.Milliseconds()}
	}
	v.BadKey = holdings[0].Bad
	rec, err := state.NewStore(a.client, a.keys).Load(ctx, id)
	if err != nil {
		return sessionView{}, err
	}
	v.State = newStateView(rec)
	v.now = rec.Read
	if v.now.IsZero() {
		v.now = time.Now()
	}
	slots, err := loadSlotViews(ctx, a, []session.Session{s}, v.now)
	if err != nil {
		return sessionView{}, err
	}
	v.Slots = slots[id]
	return v, nil
}

// stamp prints t in UTC with its zone, and how long before now it was;
// "never" for the zero time.
func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 MST") + " (" + ago(t, now) + ")"
}

// ago is how long before now t was, to the second below a minute and to
// the minute above; "-" for the zero time.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return d.Round(time.Second).String() + " ago"
	}
	return d.Round(time.Minute).String() + " ago"
}

// outcomeText is a state's last outcome: the status, or the error class
// when no response arrived.
func outcomeText(st *httppoll.State) string {
	if st.Status == 0 {
		return st.Error
	}
	return strconv.Itoa(st.Status)
}

func printSessionView(w io.Writer, v sessionView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, f string, a ...any) { fmt.Fprintf(tw, "%s:\t%s\n", k, fmt.Sprintf(f, a...)) }
	s := v.Session
	paused := "no"
	if s.Paused {
		paused = "yes"
	}
	row("id", "%s", s.ID)
	row("url", "%s", s.URL)
	if s.Schedule != "" {
		row("schedule", "%s (tz %s, catchup %s within %s)", s.Schedule, s.TZ, s.CatchUp, s.CatchUpWindow)
		if s.Jitter != "" {
			row("jitter", "%s", s.Jitter)
		}
	} else {
		row("interval", "%s", s.Interval)
	}
	row("paused", "%s", paused)
	row("labels", "%s", formatLabels(s.Labels))
	row("selector", "%s", dash(s.Selector))
	row("method", "%s", s.Method)
	row("headers", "%s", formatHeaders(s.Headers))
	if s.Body != "" {
		row("body", "%s", rawText([]byte(s.Body)))
	}
	row("expect", "%s", s.Expect)
	row("profile", "%s", dash(s.Profile))
	row("timeout", "%s", cmp.Or(s.Timeout, "- (the worker's --poll-timeout)"))
	printSlots(row, v.Slots, v.now)
	if l := v.Lease; l != nil {
		row("lease", "held by %s (incarnation %s), expires in %v", l.Holder, l.Incarnation, time.Duration(l.ExpiresInMs)*time.Millisecond)
	} else {
		row("lease", "not held")
	}
	if b := v.BadKey; b != nil {
		row("bad key", "%s key %s: %s; nobody acquires the session until it is repaired or deleted by hand", b.Role, b.Key, b.Problem)
	}
	st := v.State
	switch {
	case st == nil:
		row("state", "none saved yet")
	case st.Corrupt != "":
		row("state", "corrupt (%s): the workers poll the session as never saved; its next save overwrites it", st.Corrupt)
	case st.HTTP == nil:
		row("state", "%d bytes saved %s under token %d (not the HTTP poller's)", st.Bytes, stamp(st.Saved, st.now), st.Token)
		row("data", "%s", rawText(st.Raw))
	default:
		h := st.HTTP
		row("state", "saved %s by %s under token %d", stamp(st.Saved, st.now), h.Worker, st.Token)
		row("last saved poll", "%s", stamp(h.Polled, st.now))
		row("status", "%s, in %v", outcomeText(h), h.Latency())
		row("last success", "%s", stamp(h.LastSuccess, st.now))
		if h.Failures > 0 {
			row("failures", "%d in a row, since %s", h.Failures, stamp(h.FailingSince, st.now))
			row("last error", "%s", dash(h.Message))
		} else {
			row("failures", "0")
		}
		row("last change", "%s", stamp(h.Changed, st.now))
		row("backoff", "%v", h.Backoff())
		row("etag", "%s", dash(h.ETag))
		row("last-modified", "%s", dash(h.LastModified))
		row("body sha256", "%s", dash(h.BodySHA256))
	}
	_ = tw.Flush()
}

// loadStates reads the saved states of sessions with LoadMany, stateChunk
// at a time.
func loadStates(ctx context.Context, a admin, sessions []session.Session) (map[string]*stateView, error) {
	store := state.NewStore(a.client, a.keys)
	out := make(map[string]*stateView, len(sessions))
	for lo := 0; lo < len(sessions); lo += stateChunk {
		chunk := sessions[lo:min(lo+stateChunk, len(sessions))]
		ids := make([]string, len(chunk))
		for i, s := range chunk {
			ids[i] = s.ID
		}
		recs, err := store.LoadMany(ctx, ids)
		if err != nil {
			return nil, err
		}
		for id, rec := range recs {
			if v := newStateView(rec); v != nil {
				out[id] = v
			}
		}
	}
	return out, nil
}

// wideColumns are the columns sessions list --wide adds, and wideRow their
// values for one session's state (nil: none saved).
const wideColumns = "\tSTATUS\tLATENCY\tLAST SUCCESS\tFAILURES\tLAST CHANGE\tSAVED BY"

func wideRow(v *stateView, s session.Session) string {
	switch {
	case v == nil:
		return "\t-\t-\t-\t-\t-\t-"
	case v.HTTP == nil:
		return "\t?\t-\t-\t-\t-\t-"
	}
	h := v.HTTP
	return strings.Join([]string{"", outcomeText(h), h.Latency().Round(100 * time.Microsecond).String(),
		lastSuccessText(v, s), strconv.Itoa(h.Failures), ago(h.Changed, v.now), h.Worker}, "\t")
}

// stateSlack is how late past httppoll.DefaultStateRefresh and one
// interval a healthy session's state may be saved (a late poll, a slow
// request) and still be read as current.
const stateSlack = 10 * time.Second

// lastSuccessText is the LAST SUCCESS column of sessions list --wide.
// The HTTP poller saves a failure at once but refreshes a healthy
// session's state only every httppoll.DefaultStateRefresh, so its saved
// last success is up to a minute old while the session is fine: a state
// without failures saved within the refresh, one interval and stateSlack
// (by the Redis clock) says every poll since succeeded, shown as "current".
// Otherwise (failing, paused, not polled lately, a schedule without an
// interval) the saved time's age.
func lastSuccessText(v *stateView, s session.Session) string {
	h := v.HTTP
	iv := s.Interval.D()
	if h.Failures == 0 && !h.LastSuccess.IsZero() && !s.Paused && iv > 0 &&
		v.now.Sub(v.Saved) <= httppoll.DefaultStateRefresh+iv+stateSlack {
		return "current"
	}
	return ago(h.LastSuccess, v.now)
}
