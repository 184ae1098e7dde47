package timeline

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"sort"
	"strings"
	"time"
)

// Series is one line of a chart: a name and its values over time.
type Series struct {
	Name   string
	Times  []time.Time
	Values []float64
}

// Of is the series of each worker's timeline for one measure, in worker
// order.
func Of(lines map[string][]Point, measure func(Point) float64) []Series {
	ids := make([]string, 0, len(lines))
	for id := range lines {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]Series, 0, len(ids))
	for _, id := range ids {
		s := Series{Name: id}
		for _, p := range lines[id] {
			s.Times = append(s.Times, p.At)
			s.Values = append(s.Values, measure(p))
		}
		out = append(out, s)
	}
	return out
}

// palette colours the lines of a chart in order (colour-blind safe, after
// Okabe and Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"}

// Chart dimensions, in SVG user units.
const (
	chartW, chartH = 420, 120
	padL, padB     = 44, 18
)

// Chart draws series between from and to as an inline SVG line chart with a
// title, a y axis from 0 to the largest value, a time axis and a legend. It
// reads no clock; the page passes from and to.
func Chart(title string, series []Series, from, to time.Time) template.HTML {
	top := 0.0
	for _, s := range series {
		for j, v := range s.Values {
			if j < len(s.Times) && !s.Times[j].Before(from) && !math.IsNaN(v) && !math.IsInf(v, 0) {
				top = math.Max(top, v)
			}
		}
	}
	if top == 0 {
		top = 1
	}
	span := to.Sub(from).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 {
		return padL + (chartW-padL)*math.Min(1, math.Max(0, t.Sub(from).Seconds()/span))
	}
	y := func(v float64) float64 { return (chartH - padB) * (1 - math.Min(1, math.Max(0, v/top))) }
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="chart"><figcaption>%s</figcaption><svg role="img" aria-label="%s" viewBox="0 0 %d %d" width="%d" height="%d">`,
		html.EscapeString(title), html.EscapeString(title), chartW, chartH+16*((len(series)+2)/3), chartW, chartH+16*((len(series)+2)/3))
	fmt.Fprintf(&b, `<line x1="%d" y1="0" x2="%d" y2="%d" stroke="#999"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`,
		padL, padL, chartH-padB, padL, chartH-padB, chartW, chartH-padB)
	fmt.Fprintf(&b, `<text x="%d" y="10" font-size="10" text-anchor="end">%s</text><text x="%d" y="%d" font-size="10" text-anchor="end">0</text>`,
		padL-4, axisLabel(top), padL-4, chartH-padB)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10">-%s</text><text x="%d" y="%d" font-size="10" text-anchor="end">now</text>`,
		padL, chartH-4, strings.TrimSuffix(to.Sub(from).Round(time.Minute).String(), "0s"), chartW, chartH-4)
	for i, s := range series {
		colour := palette[i%len(palette)]
		var pts []string
		for j, t := range s.Times {
			if j < len(s.Values) && !t.Before(from) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(t), y(s.Values[j])))
			}
		}
		if len(pts) == 1 {
			pts = append(pts, pts[0]) // a single point still shows
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline class="series" data-name="%s" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`,
				html.EscapeString(s.Name), colour, strings.Join(pts, " "))
		}
		lx, ly := padL+(i%3)*125, chartH+12+16*(i/3)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="3" fill="%s"/><text x="%d" y="%d" font-size="10">%s</text>`,
			lx, ly-4, colour, lx+14, ly, html.EscapeString(s.Name))
	}
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String()) // #nosec: every text above is escaped
}

// Bar is one worker's row of a placement bar chart.
type Bar struct {
	Name          string
	Held, Planned float64
}

// Bars draws, per worker, what it holds against what the planner gives it,
// as two horizontal bars on one scale, with the numbers.
func Bars(title, unit string, bars []Bar) template.HTML {
	top := 0.0
	for _, r := range bars {
		top = math.Max(top, math.Max(r.Held, r.Planned))
	}
	if top == 0 {
		top = 1
	}
	const rowH, nameW, barW = 26, 120, 260
	h := rowH*len(bars) + 18
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="chart"><figcaption>%s</figcaption><svg role="img" aria-label="%s" viewBox="0 0 %d %d" width="%d" height="%d">`,
		html.EscapeString(title), html.EscapeString(title), nameW+barW+90, h, nameW+barW+90, h)
	for i, r := range bars {
		y0 := i * rowH
		fmt.Fprintf(&b, `<text x="0" y="%d" font-size="11">%s</text>`, y0+14, html.EscapeString(r.Name))
		fmt.Fprintf(&b, `<rect class="held" x="%d" y="%d" width="%.1f" height="9" fill="#0072B2"/>`, nameW, y0+3, barW*r.Held/top)
		fmt.Fprintf(&b, `<rect class="planned" x="%d" y="%d" width="%.1f" height="9" fill="#E69F00"/>`, nameW, y0+13, barW*r.Planned/top)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10">%s / %s %s</text>`, nameW+barW+6, y0+14, axisLabel(r.Held), axisLabel(r.Planned), html.EscapeString(unit))
	}
	ly := rowH*len(bars) + 12
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="6" fill="#0072B2"/><text x="%d" y="%d" font-size="10">held</text>`, nameW, ly-6, nameW+14, ly)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="6" fill="#E69F00"/><text x="%d" y="%d" font-size="10">planned</text>`, nameW+60, ly-6, nameW+74, ly)
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String()) // #nosec: every text above is escaped
}

// axisLabel prints v short: 0.25, 3.5, 120, 4.2k.
func axisLabel(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}
