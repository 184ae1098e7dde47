package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pollworker/pollworker/bench"
)

// Row is one figure of the report.
type Row struct {
	Scenario string         `json:"scenario"`
	Figure   string         `json:"figure"`
	Target   string         `json:"target"`
	Unit     string         `json:"unit"`
	Ours     bench.Summary  `json:"ours"`
	Base     *bench.Summary `json:"baseline,omitempty"`
	BaseName string         `json:"baseline_name,omitempty"`
	// Ratio is baseline median / ours median: how many times better ours is
	// when smaller is better (for throughput figures it is inverted).
	Ratio float64 `json:"ratio,omitempty"`
	Met   string  `json:"met,omitempty"` // "yes", "no" or "" (no target)
	Note  string  `json:"note,omitempty"`
}

// Report is what one run of pollbench measured.
type Report struct {
	Started  time.Time `json:"started"`
	Elapsed  string    `json:"elapsed"`
	Mode     string    `json:"mode"`
	Runs     int       `json:"runs"`
	Machine  Machine   `json:"machine"`
	Command  string    `json:"command"`
	Rows     []Row     `json:"rows"`
	Failures []string  `json:"failures,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs  int    `json:"nproc"`
	Model string `json:"cpu_model"`
	Go    string `json:"go"`
	Redis string `json:"redis_server"`
	OS    string `json:"os"`
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Redis: bench.Version(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, Model: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func num(x float64, unit string) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	var s string
	switch ax := math.Abs(x); {
	case ax == 0:
		s = "0"
	case ax >= 1000:
		s = fmt.Sprintf("%.0f", x)
	case ax >= 100:
		s = fmt.Sprintf("%.1f", x)
	case ax >= 1:
		s = fmt.Sprintf("%.2f", x)
	default:
		s = fmt.Sprintf("%.3f", x)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}

func (r Row) cells() []string {
	base, ratio := "", ""
	if r.Base != nil {
		base = num(r.Base.Median, r.Unit)
		if r.BaseName != "" {
			base += " (" + r.BaseName + ")"
		}
	}
	if r.Ratio != 0 && !math.IsNaN(r.Ratio) && !math.IsInf(r.Ratio, 0) {
		ratio = fmt.Sprintf("%.2f×", r.Ratio)
	}
	return []string{r.Figure, r.Target, num(r.Ours.Median, r.Unit), num(r.Ours.P99, r.Unit), base, ratio, r.Met}
}

var header = []string{"figure", "target", "ours median", "ours p99", "baseline median", "baseline/ours", "met"}

// WriteText prints the report as an aligned table.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "pollbench %s mode, %d runs per figure (e2e and cold: their notes give theirs), %s\n", rep.Mode, rep.Runs, rep.Elapsed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	last := ""
	for _, r := range rep.Rows {
		if r.Scenario != last {
			fmt.Fprintf(tw, "[%s]\t\t\t\t\t\t\n", r.Scenario)
			last = r.Scenario
		}
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t"))
	}
	tw.Flush()
	for _, r := range rep.Rows {
		if r.Note != "" {
			fmt.Fprintf(w, "  note (%s): %s\n", r.Figure, r.Note)
		}
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "FAILED: %s\n", f)
	}
}

// WriteMarkdown writes the report as BENCHMARKS.md-ready markdown.
func (rep *Report) WriteMarkdown(w io.Writer) {
	m := rep.Machine
	fmt.Fprintf(w, "Run: `%s` (%s mode, %d runs per figure, e2e and cold excepted: their notes give their runs; %s; started %s)\n\n", rep.Command, rep.Mode, rep.Runs, rep.Elapsed, rep.Started.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Machine: %d CPUs, %s, %s, %s, %s\n\n", m.CPUs, m.Model, m.OS, m.Go, m.Redis)
	fmt.Fprintln(w, "| scenario | "+strings.Join(header, " | ")+" |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "| %s | %s |\n", r.Scenario, strings.Join(r.cells(), " | "))
	}
	notes := false
	for _, r := range rep.Rows {
		if r.Note != "" {
			if !notes {
				fmt.Fprintln(w, "\nNotes:")
				notes = true
			}
			fmt.Fprintf(w, "- %s: %s\n", r.Figure, r.Note)
		}
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "\n**FAILED:** %s\n", f)
	}
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	for i := range rep.Rows {
		if r := rep.Rows[i].Ratio; math.IsNaN(r) || math.IsInf(r, 0) {
			rep.Rows[i].Ratio = 0
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}
