package main

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
)

// The page's charts are inline SVG laid out here; report.html.tmpl only
// places them. html/template escapes every value from the data.

//go:embed report.html.tmpl
var reportTemplateText string

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"commas":     commas,
	"when":       func(t time.Time) string { return reportTime(t) },
	"usd":        func(x float64) string { return dispatcher.USD(x) },
	"cost":       costCell,
	"counts":     func(m map[sluice.RequestState]int64) string { return countsLine(m, requestOrder) },
	"chunks":     func(m map[sluice.ChunkState]int) string { return countsLine(m, chunkOrder) },
	"req":        func(m map[sluice.RequestState]int64, s string) int64 { return m[sluice.RequestState(s)] },
	"args":       func(id, label string, v lineView) lineArgs { return lineArgs{ID: id, Label: label, View: v} },
	"errs":       func(id string, g []codeGroup) errorsArgs { return errorsArgs{ID: id, Groups: g} },
	"barEnd":     func(w float64) float64 { return labelW + w + 6 },
	"textY":      func(y float64) float64 { return y + 10 },
	"trimS":      func(c string) string { return strings.TrimPrefix(c, "s-") },
	"plotBottom": func(v lineView) float64 { return lineTop + v.PlotH },
	"plotTop":    func() float64 { return lineTop },
	"axisY":      func(v lineView) float64 { return lineTop + v.PlotH + 16 },
	"plotRight":  func(v lineView) float64 { return v.PlotX + v.PlotW },
	"yLabelX":    func(v lineView) float64 { return v.PlotX - 6 },
	"guideX":     func(v lineView) float64 { return v.PlotX + v.PlotW + 6 },
}).Parse(reportTemplateText))

const (
	chartW   = 1100.0 // every chart's width
	labelW   = 190.0  // the time line's row labels
	plotPadR = 20.0
	rowH     = 16.0
	axisH    = 28.0
	lineH    = 260.0 // the line charts' plot height
	lineTop  = 20.0  // and the room above it
	// reportRows is the most batch rows drawn; more are counted.
	reportRows = 1500
)

func reportTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// reportView is what the template shows.
type reportView struct {
	*reportData
	Timeline timelineView
	Progress lineView
	Spend    lineView
	Tokens   barsView
}

type tick struct {
	X     float64
	Label string
}

type timelineView struct {
	Height, PlotX, PlotW float64
	Rows                 []timelineRow
	Hidden               int
	Ticks                []tick
	NowX                 float64
}

type timelineRow struct {
	Y, LabelY           float64
	Chunk               int64
	Attempt             int
	State, Class, Label string
	Submit, Run         *span
	Title               string
}

type span struct{ X, Y, W float64 }

type lineArgs struct {
	ID, Label string
	View      lineView
}

type errorsArgs struct {
	ID     string
	Groups []codeGroup
}

type lineView struct {
	Height, PlotX, PlotW, PlotH float64
	Series                      []series
	Guides                      []guide
	Ticks                       []tick
	YTicks                      []tick
	Empty                       string
}

type series struct {
	Class, Name, Points string
	Dots                []dot
	// End labels the series at its last point.
	End        string
	EndX, EndY float64
}

type dot struct {
	X, Y  float64
	Title string
}

type guide struct {
	Class, Label string
	Y            float64
}

type barsView struct {
	Height float64
	Groups []barGroup
	Empty  string
}

type barGroup struct {
	Label  string
	LabelY float64
	Bars   []tokenBar
}

type tokenBar struct {
	Class, Label string
	Y, W         float64
	Value        int64
}

func renderReport(w io.Writer, rd *reportData) error {
	v := reportView{reportData: rd}
	v.Timeline = layoutTimeline(rd)
	v.Progress = layoutProgress(rd)
	v.Spend = layoutSpend(rd)
	v.Tokens = layoutTokens(rd)
	return reportTemplate.Execute(w, v)
}

// axis maps times to x between x0 and x0+w.
type axis struct {
	start, end time.Time
	x0, w      float64
}

func (a axis) x(t time.Time) float64 {
	if t.Before(a.start) {
		t = a.start
	}
	return a.x0 + a.w*float64(t.Sub(a.start))/float64(a.end.Sub(a.start))
}

func (a axis) ticks() []tick {
	var ts []tick
	layout := "15:04:05"
	if a.end.Sub(a.start) < 10*time.Second {
		layout = "15:04:05.0"
	}
	for i := 0; i <= 5; i++ {
		t := a.start.Add(a.end.Sub(a.start) * time.Duration(i) / 5)
		ts = append(ts, tick{X: a.x(t), Label: t.UTC().Format(layout)})
	}
	return ts
}

func layoutTimeline(rd *reportData) timelineView {
	ax := axis{rd.Start, rd.End, labelW, chartW - labelW - 3*plotPadR}
	v := timelineView{PlotX: labelW, PlotW: ax.w, Ticks: ax.ticks()}
	if rd.Running {
		v.NowX = ax.x(rd.Generated)
	}
	for i, c := range rd.Chunks {
		if i == reportRows {
			v.Hidden = len(rd.Chunks) - i
			break
		}
		y := axisH + float64(i)*rowH
		r := timelineRow{Y: y + 3, LabelY: y + 12, Chunk: c.ID, Attempt: c.Attempt, State: string(c.State)}
		r.Label = fmt.Sprintf("chunk %d · attempt %d", c.ID, c.Attempt)
		r.Class = batchClass(c)
		end := c.EndedAt
		if end.IsZero() {
			end = rd.End
		}
		if !c.IntentAt.IsZero() && c.SubmittedAt.After(c.IntentAt) {
			r.Submit = &span{X: ax.x(c.IntentAt), Y: r.Y, W: max(1, ax.x(c.SubmittedAt)-ax.x(c.IntentAt))}
		}
		if start := c.SubmittedAt; !start.IsZero() {
			r.Run = &span{X: ax.x(start), Y: r.Y, W: max(2, ax.x(end)-ax.x(start))}
		} else if !c.IntentAt.IsZero() {
			r.Run = &span{X: ax.x(c.IntentAt), Y: r.Y, W: max(2, ax.x(end)-ax.x(c.IntentAt))}
		}
		r.Title = batchTitle(c, rd.Outcomes[c.ID])
		v.Rows = append(v.Rows, r)
	}
	v.Height = axisH + float64(len(v.Rows))*rowH + 10
	return v
}

// batchClass is the row's look: ended well, failed, still running, not
// yet sent; a retry attempt is drawn as one.
func batchClass(c *sluice.Chunk) string {
	cls := "b-pending"
	switch {
	case c.State == sluice.ChunkDone:
		cls = "b-done"
	case c.State == sluice.ChunkFailed:
		cls = "b-failed"
	case c.State == sluice.ChunkSubmitted:
		cls = "b-running"
	case c.State == sluice.ChunkUploading || c.State == sluice.ChunkUploaded || c.State == sluice.ChunkCreating:
		cls = "b-submitting"
	}
	if c.Attempt-c.Splits > 1 { // a split spends no attempt
		cls += " b-retry"
	}
	return cls
}

func batchTitle(c *sluice.Chunk, o chunkOutcome) string {
	t := fmt.Sprintf("chunk %d attempt %d: %s, %s, %s %d requests", c.ID, c.Attempt, c.State, orDash(c.BatchStatus), c.Model, c.Requests)
	if c.BatchID != "" {
		t += "\nbatch " + c.BatchID
	}
	t += "\nsubmitted " + reportTime(c.SubmittedAt) + ", ended " + reportTime(c.EndedAt)
	if o.Succeeded+o.Failed > 0 {
		t += fmt.Sprintf("\n%d succeeded, %d failed here", o.Succeeded, o.Failed)
	}
	if e := c.ErrorText(); e != "" {
		t += "\nlast error: " + oneLine(e)
	}
	return t
}

// layoutProgress draws requests succeeded and failed for good over time,
// counted from each batch's results as it ended.
func layoutProgress(rd *reportData) lineView {
	type ev struct {
		at   time.Time
		o    chunkOutcome
		name string
	}
	var evs []ev
	for _, c := range rd.Chunks {
		if o, ok := rd.Outcomes[c.ID]; ok {
			at := c.EndedAt
			if at.IsZero() {
				at = rd.End
			}
			evs = append(evs, ev{at, o, fmt.Sprintf("chunk %d attempt %d", c.ID, c.Attempt)})
		}
	}
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].at.Before(evs[b].at) })
	total := rd.Job.Total
	v, ax, y := lineFrame(rd, float64(max(total, 1)))
	v.YTicks = countTicks(y, float64(max(total, 1)))
	v.Guides = []guide{{Class: "g-total", Label: commas(total) + " requests", Y: y(float64(total))}}
	ok, bad := series{Class: "s-succeeded", Name: "succeeded"}, series{Class: "s-failed", Name: "failed"}
	s, f := rd.Reused, int64(0)
	okPts := fmt.Sprintf("%.1f,%.1f", ax.x(rd.Start), y(float64(s)))
	badPts := fmt.Sprintf("%.1f,%.1f", ax.x(rd.Start), y(0))
	for _, e := range evs {
		x := ax.x(e.at)
		okPts += fmt.Sprintf(" %.1f,%.1f", x, y(float64(s)))
		badPts += fmt.Sprintf(" %.1f,%.1f", x, y(float64(f)))
		s, f = s+e.o.Succeeded, f+e.o.Failed
		okPts += fmt.Sprintf(" %.1f,%.1f", x, y(float64(s)))
		badPts += fmt.Sprintf(" %.1f,%.1f", x, y(float64(f)))
		ok.Dots = append(ok.Dots, dot{X: x, Y: y(float64(s)), Title: fmt.Sprintf("%s ended %s: %s succeeded in all", e.name, reportTime(e.at), commas(s))})
		bad.Dots = append(bad.Dots, dot{X: x, Y: y(float64(f)), Title: fmt.Sprintf("%s ended %s: %s failed in all", e.name, reportTime(e.at), commas(f))})
	}
	end := ax.x(rd.End)
	ok.Points = okPts + fmt.Sprintf(" %.1f,%.1f", end, y(float64(s)))
	bad.Points = badPts + fmt.Sprintf(" %.1f,%.1f", end, y(float64(f)))
	ok.End, ok.EndX, ok.EndY = commas(s)+" succeeded", end+6, y(float64(s))
	bad.End, bad.EndX, bad.EndY = commas(f)+" failed", end+6, y(float64(f))
	if bad.EndY-ok.EndY < 12 { // keep the two labels apart
		bad.EndY = ok.EndY + 12
	}
	v.Series = []series{ok, bad}
	if len(evs) == 0 {
		v.Empty = "no batch has ended yet"
	}
	return v
}

// lineFrame is a line chart's frame over the job's time axis and a y
// scale from 0 to top.
func lineFrame(rd *reportData, top float64) (lineView, axis, func(float64) float64) {
	ax := axis{rd.Start, rd.End, 80, chartW - 80 - plotPadR - 120}
	v := lineView{Height: lineTop + lineH + axisH, PlotX: ax.x0, PlotW: ax.w, PlotH: lineH, Ticks: ax.ticks()}
	y := func(val float64) float64 { return lineTop + lineH - lineH*val/top }
	return v, ax, y
}

func countTicks(y func(float64) float64, top float64) []tick {
	var ts []tick
	for i := 0; i <= 4; i++ {
		val := top * float64(i) / 4
		ts = append(ts, tick{X: y(val), Label: commas(int64(val + 0.5))})
	}
	return ts
}

// layoutSpend draws the actual spend as batches ended, against the cap
// and what live batches commit at most.
func layoutSpend(rd *reportData) lineView {
	m := rd.Job.Money
	top := 0.0
	if n := len(rd.Spent); n > 0 {
		top = rd.Spent[n-1].USD
	}
	var capUSD, committed *float64
	if m != nil && m.CapUSD != nil {
		c := float64(*m.CapUSD)
		capUSD, top = &c, max(top, c)
	}
	if m != nil && m.CommittedUSD != nil {
		c := float64(*m.CommittedUSD)
		committed, top = &c, max(top, c)
	}
	if top <= 0 {
		top = 0.01
	}
	top *= 1.1
	v, ax, y := lineFrame(rd, top)
	for i := 0; i <= 4; i++ {
		val := top * float64(i) / 4
		v.YTicks = append(v.YTicks, tick{X: y(val), Label: dispatcher.USD(val)})
	}
	sp := series{Class: "s-spend", Name: "spent"}
	pts, total := fmt.Sprintf("%.1f,%.1f", ax.x(rd.Start), y(0)), 0.0
	for _, p := range rd.Spent {
		x := ax.x(p.At)
		pts += fmt.Sprintf(" %.1f,%.1f %.1f,%.1f", x, y(total), x, y(p.USD))
		total = p.USD
		sp.Dots = append(sp.Dots, dot{X: x, Y: y(total), Title: reportTime(p.At) + ": " + dispatcher.USD(total) + " spent"})
	}
	sp.Points = pts + fmt.Sprintf(" %.1f,%.1f", ax.x(rd.End), y(total))
	sp.End, sp.EndX, sp.EndY = dispatcher.USD(total)+" spent", ax.x(rd.End)+6, y(total)-8
	v.Series = []series{sp}
	if capUSD != nil {
		v.Guides = append(v.Guides, guide{Class: "g-cap", Label: "cap " + dispatcher.USD(*capUSD), Y: y(*capUSD)})
	}
	if committed != nil && *committed > total*1.001 {
		v.Guides = append(v.Guides, guide{Class: "g-committed", Label: "committed " + dispatcher.USD(*committed), Y: y(*committed)})
	}
	if m != nil && len(m.Unpriced) > 0 {
		v.Empty = "no price for some models: spend unknown"
	}
	return v
}

// layoutTokens draws per model the input tokens planned, sluice's
// estimate of the requests whose usage was reported, and that usage.
func layoutTokens(rd *reportData) barsView {
	top := int64(1)
	for _, m := range rd.Models {
		top = max(top, m.Planned, m.Estimated, m.Reported)
	}
	plotW := chartW - labelW - plotPadR - 160
	wOf := func(n int64) float64 { return max(1, plotW*float64(n)/float64(top)) }
	var v barsView
	y := 10.0
	for _, m := range rd.Models {
		g := barGroup{Label: orDash(m.Model), LabelY: y + 26}
		for _, b := range []tokenBar{
			{Class: "t-planned", Label: "planned estimate", Value: m.Planned},
			{Class: "t-estimated", Label: "estimate of the reported", Value: m.Estimated},
			{Class: "t-reported", Label: "reported by the provider", Value: m.Reported},
		} {
			b.Y, b.W = y, wOf(b.Value)
			g.Bars = append(g.Bars, b)
			y += 16
		}
		y += 14
		v.Groups = append(v.Groups, g)
	}
	v.Height = y + 10
	if len(rd.Models) == 0 {
		v.Empty = "no batches planned"
	}
	return v
}
