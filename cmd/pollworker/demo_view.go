package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
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
	viewEvents        = 7                      // events kept on screen
	viewRowSessions   = 10                     // sessions per grid row
)

// demoView draws the demo: on a terminal, a frame redrawn in place; else
// a status line every second and each event as it happens. Only its run
// goroutine writes to out.
type demoView struct {
	d     *demo
	out   io.Writer
	start time.Time
	tty   bool
	width int

	height     int       // lines of the last frame (tty)
	printed    int       // events printed (plain)
	lastStatus time.Time // last status line (plain)
}

func newDemoView(d *demo, out io.Writer, start time.Time, tty bool) *demoView {
	width := 100
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 40 {
		width = n
	}
	return &demoView{d: d, out: out, start: start, tty: tty, width: width}
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
func (v *demoView) run(stop <-chan struct{}) {
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

func (v *demoView) draw(final bool) {
	if v.tty {
		v.drawFrame()
		return
	}
	for _, e := range v.d.rec.eventsSince(v.printed) {
		fmt.Fprintf(v.out, "[%5.1fs] %s\n", e.at.Seconds(), e.text)
		v.printed++
	}
	if now := time.Now(); final || now.Sub(v.lastStatus) >= viewLineInterval {
		v.lastStatus = now
		fmt.Fprintf(v.out, "[%5.1fs] %s\n", now.Sub(v.start).Seconds(), v.statusLine())
	}
}

// statusLine is the plain view's periodic line.
func (v *demoView) statusLine() string {
	owners := v.d.rec.owners()
	held := map[string]int{}
	for _, w := range owners {
		held[w]++
	}
	var parts []string
	for _, w := range v.d.snapshot() {
		parts = append(parts, fmt.Sprintf("%s %s %d leases %d polls", w.name, v.state(w), held[w.name], v.d.rec.pollsOf(w.name)))
	}
	return strings.Join(parts, " | ") + fmt.Sprintf(" | unowned %d", len(v.d.sessions)-len(owners))
}

func (v *demoView) state(w *demoWorker) string {
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
func (v *demoView) drawFrame() {
	lines := v.frame()
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

// frame is the terminal view: workers, the session grid, counters and the
// latest events.
func (v *demoView) frame() []string {
	d := v.d
	owners := d.rec.owners()
	held := map[string]int{}
	for _, w := range owners {
		held[w]++
	}
	t := d.rec.totals()
	lines := []string{
		fmt.Sprintf("pollworker demo   t=%4.1fs of %v   %d sessions, %d HTTP targets, embedded Redis %s",
			time.Since(v.start).Seconds(), d.opts.Duration, len(d.sessions), len(d.targets), d.mr.Addr()),
		"  leader election on this Redis, in another terminal: " + d.electionCommand(),
		"",
		"  WORKER     STATE     LEASES  POLLS",
	}
	for _, w := range d.snapshot() {
		lines = append(lines, fmt.Sprintf("  %-9s  %-8s  %6d  %5d  %s",
			w.name, v.state(w), held[w.name], t.polls[w.name], strings.Repeat("█", held[w.name])))
	}
	lines = append(lines, "", "  sessions (digit: worker holding the lease, ·: nobody)")
	for i := 0; i < len(d.sessions); i += viewRowSessions {
		row := d.sessions[i:min(i+viewRowSessions, len(d.sessions))]
		cells := make([]string, len(row))
		for j, id := range row {
			cells[j] = "·"
			if w, ok := owners[id]; ok {
				cells[j] = strings.TrimPrefix(w, "worker-")
			}
		}
		lines = append(lines, fmt.Sprintf("  %s-%s  %s", row[0], row[len(row)-1], strings.Join(cells, " ")))
	}
	lines = append(lines, "",
		fmt.Sprintf("  handoffs %d   highest token %d   overlapping polls %d   stale tokens %d",
			t.handoffs, t.topToken, t.overlaps, t.stale),
		"", "  events")
	events := d.rec.eventsSince(0)
	events = events[max(0, len(events)-viewEvents):]
	for i := range viewEvents {
		if i < len(events) {
			lines = append(lines, fmt.Sprintf("  %5.1fs  %s", events[i].at.Seconds(), events[i].text))
		} else {
			lines = append(lines, "")
		}
	}
	return lines
}
