package demo

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pollworker/pollworker/internal/history"
)

// ANSI escape sequences of the terminal view.
const (
	ansiUp         = "\x1b[%dA" // cursor up n lines
	ansiClearLine  = "\x1b[2K"
	ansiHideCursor = "\x1b[?25l"
	ansiShowCursor = "\x1b[?25h"
)

// View settings.
const (
	viewFrameInterval = 100 * time.Millisecond // terminal redraws
	viewLineInterval  = time.Second            // plain status lines
	viewCheckInterval = time.Second            // terminal: history checks
	viewEventLines    = 12                     // lines of announcements on screen
	viewRowSessions   = 10                     // sessions per grid row
)

// view draws the demo: on a terminal, a frame redrawn in place; else an
// announcement per line as it is made, and a status line every second.
// Every figure comes from a recorder snapshot, stamped with the time of
// the snapshot. Only its run goroutine writes to out.
type view struct {
	d     *demo
	out   io.Writer
	start time.Time
	tty   bool
	width int

	height     int            // lines of the last frame (tty)
	printed    int            // announcements printed (plain)
	lastStatus time.Time      // last status line (plain)
	checked    time.Time      // last history check (tty)
	totals     history.Totals // its result
}

func newView(d *demo, out io.Writer, start time.Time, tty bool) *view {
	width := 100
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 40 {
		width = n
	}
	return &view{d: d, out: out, start: start, tty: tty, width: width}
}

// isTerminal reports whether w is a character device (a terminal) that
// understands ANSI escapes.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// run draws until stop is closed, then draws a last time.
func (v *view) run(stop <-chan struct{}) {
	interval := viewLineInterval / 10
	if v.tty {
		interval = viewFrameInterval
		fmt.Fprint(v.out, ansiHideCursor)
		defer fmt.Fprint(v.out, ansiShowCursor)
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			v.draw(true)
			return
		case <-ticker.C:
			v.draw(false)
		}
	}
}

func (v *view) draw(final bool) {
	if v.tty {
		v.drawFrame(final)
		return
	}
	for _, l := range v.d.rec.linesSince(v.printed) {
		fmt.Fprintf(v.out, "[%5.1fs] %s\n", l.at.Seconds(), l.text)
		v.printed++
	}
	if now := time.Now(); final || now.Sub(v.lastStatus) >= viewLineInterval {
		v.lastStatus = now
		s := v.d.rec.snapshot()
		fmt.Fprintf(v.out, "[%5.1fs] %s\n", s.at.Seconds(), v.statusLine(s))
	}
}

// statusLine is the plain view's periodic line.
func (v *view) statusLine(s snapshot) string {
	held := s.counts()
	var parts []string
	for _, w := range v.d.snapshot() {
		parts = append(parts, fmt.Sprintf("%s %s %d leases %d polls", w.name, v.state(w), held[w.name], s.polls[w.name]))
	}
	return strings.Join(parts, " | ") + fmt.Sprintf(" | unowned %d", v.d.unowned(s))
}

func (v *view) state(w *worker) string {
	select {
	case <-w.done:
		return "stopped"
	default:
	}
	switch {
	case w.stopping.Load():
		return "draining"
	case w.coord.Ready():
		return "ready"
	}
	return "starting"
}

// drawFrame redraws the terminal frame in place.
func (v *view) drawFrame(final bool) {
	lines := v.frame(final)
	var b strings.Builder
	if v.height > 0 {
		fmt.Fprintf(&b, ansiUp, v.height)
	}
	for _, l := range lines {
		if r := []rune(l); len(r) > v.width {
			l = string(r[:v.width-1]) + "…"
		}
		b.WriteString(ansiClearLine + l + "\n")
	}
	v.height = len(lines)
	_, _ = io.WriteString(v.out, b.String())
}

// frame is the terminal view: workers, the session grid, the checks of
// the history so far and the latest announcements.
func (v *view) frame(final bool) []string {
	d := v.d
	s := d.rec.snapshot()
	held := s.counts()
	if now := time.Now(); final || now.Sub(v.checked) >= viewCheckInterval {
		v.checked = now
		h, _ := d.rec.history(now)
		v.totals = history.Check(h).Totals()
	}
	t := v.totals
	lines := []string{
		fmt.Sprintf("pollworker demo   t=%4.1fs of %v   %d sessions, %d HTTP targets, embedded Redis %s",
			s.at.Seconds(), d.opts.Duration, len(d.sessions), len(d.targets), d.mr.Addr()),
		"  try leader election on this Redis: " + d.electionCommand(),
		"",
		"  WORKER     STATE     LEASES  POLLS",
	}
	for _, w := range d.snapshot() {
		lines = append(lines, fmt.Sprintf("  %-9s  %-8s  %6d  %5d  %s",
			w.name, v.state(w), held[w.name], s.polls[w.name], strings.Repeat("█", held[w.name])))
	}
	lines = append(lines, "", "  sessions (digit: worker holding the lease, ·: nobody)")
	for i := 0; i < len(d.sessions); i += viewRowSessions {
		row := d.sessions[i:min(i+viewRowSessions, len(d.sessions))]
		cells := make([]string, len(row))
		for j, id := range row {
			cells[j] = "·"
			if w, ok := s.holders[id]; ok {
				cells[j] = strings.TrimPrefix(w, "worker-")
			}
		}
		lines = append(lines, fmt.Sprintf("  %s-%s  %s", row[0], row[len(row)-1], strings.Join(cells, " ")))
	}
	lines = append(lines, "",
		fmt.Sprintf("  finished polls checked %d   handoffs %d   highest token %d   overlapping polls %d   stale tokens %d",
			t.Polls, t.Handoffs, t.MaxToken, t.Overlaps, t.Stale),
		"", "  events")
	var events []string
	for _, e := range d.rec.linesSince(0) {
		for i, l := range wrap(e.text, v.width-10) {
			if i == 0 {
				events = append(events, fmt.Sprintf("  %5.1fs  %s", e.at.Seconds(), l))
			} else {
				events = append(events, "          "+l)
			}
		}
	}
	events = events[max(0, len(events)-viewEventLines):]
	for i := range viewEventLines {
		if i < len(events) {
			lines = append(lines, events[i])
		} else {
			lines = append(lines, "")
		}
	}
	return lines
}

// wrap splits text at spaces into lines of at most width runes (a longer
// word gets a line of its own).
func wrap(text string, width int) []string {
	var out []string
	var cur []rune
	for _, word := range strings.Fields(text) {
		w := []rune(word)
		if len(cur) > 0 && len(cur)+1+len(w) > width {
			out = append(out, string(cur))
			cur = cur[:0]
		}
		if len(cur) > 0 {
			cur = append(cur, ' ')
		}
		cur = append(cur, w...)
	}
	if len(cur) > 0 || len(out) == 0 {
		out = append(out, string(cur))
	}
	return out
}
