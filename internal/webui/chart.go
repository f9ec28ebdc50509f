package webui

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"
)

// Charts are drawn on the server as inline SVG: nothing to build or load,
// and the page stays small.

// point is one value of a series at x (Unix seconds on a time axis).
type point struct {
	X, Y  float64
	Label string // a bar's x axis label; a time point's time, in its tooltip
	Note  string // a second line under a bar's label (its counts)
	Now   bool   // the latest measurement, not (yet) in the history
}

const (
	chartW, chartH = 560, 180
	padL, padB     = 56, 28
)

// lineChart plots series (one line each, in classes c0, c1, ...) over a
// time axis (X in Unix seconds) against a shared y scale starting at 0.
// Each point's tooltip tells its time and value.
func lineChart(title, unit string, series ...[]point) template.HTML {
	var minX, maxX, maxY float64 = math.Inf(1), math.Inf(-1), 0
	n := 0
	for _, s := range series {
		for _, p := range s {
			minX, maxX, maxY = math.Min(minX, p.X), math.Max(maxX, p.X), math.Max(maxY, p.Y)
			n++
		}
	}
	var b strings.Builder
	begin(&b, title)
	if n == 0 {
		empty(&b)
		return finish(&b)
	}
	switch mid := (minX + maxX) / 2; {
	case maxX == minX:
		minX, maxX = mid-30, mid+30 // one time: a minute around it
	case maxX-minX < 10:
		minX, maxX = mid-5, mid+5
	}
	yMax := niceMax(maxY)
	axes(&b, yMax, unit)
	xOf := func(x float64) float64 { return padL + (x-minX)/(maxX-minX)*(chartW-padL-8) }
	for _, t := range timeTicks(minX, maxX) {
		x := xOf(t.at)
		fmt.Fprintf(&b, `<line class="xgrid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/><text class="tick x" x="%.1f" y="%d">%s</text>`,
			x, chartH-padB, x, chartH-padB+4, x, chartH-padB+15, t.label)
	}
	for i, s := range series {
		pts := make([]string, len(s))
		for j, p := range s {
			pts[j] = fmt.Sprintf("%.1f,%.1f", xOf(p.X), chartH-padB-p.Y/yMax*(chartH-padB-16))
		}
		fmt.Fprintf(&b, `<polyline class="line c%d" points="%s"/>`, i, strings.Join(pts, " "))
		for j, p := range s {
			cx, cy, _ := strings.Cut(pts[j], ",")
			class := fmt.Sprintf("dot c%d", i)
			if p.Now {
				class += " now"
			}
			fmt.Fprintf(&b, `<circle class="%s" cx="%s" cy="%s" r="2.5"><title>%s UTC: %s</title></circle>`,
				class, cx, cy, template.HTMLEscapeString(p.Label), formatValue(p.Y, unit))
		}
	}
	return finish(&b)
}

// barChart draws one bar per point, each labelled under it (with its Note
// on a second line) and valued above it.
func barChart(title, unit string, points []point) template.HTML {
	return bars(title, unit, points, func(i int) string {
		if len(points) > 12 {
			return ""
		}
		return points[i].Label
	})
}

// runChart draws one bar per point in time order (X in Unix seconds): the
// axis names the times of a few of them, each tooltip its own Label.
func runChart(title, unit string, points []point) template.HTML {
	if len(points) == 0 {
		return bars(title, unit, nil, nil)
	}
	layout := timeLayout(points[len(points)-1].X-points[0].X, 0)
	// At most five labels, the first and the last among them.
	step := max(1, (len(points)+3)/4)
	return bars(title, unit, points, func(i int) string {
		if i%step == 0 || i == len(points)-1 && i%step > step/2 {
			return time.Unix(int64(points[i].X), 0).UTC().Format(layout)
		}
		return ""
	})
}

// bars draws points as bars, each with a tooltip and, when there are a
// dozen or fewer, its value; label returns the x label written under bar
// i ("" for none), its Note under that.
func bars(title, unit string, points []point, label func(i int) string) template.HTML {
	var b strings.Builder
	begin(&b, title)
	if len(points) == 0 {
		empty(&b)
		return finish(&b)
	}
	maxY := 0.0
	for _, p := range points {
		maxY = math.Max(maxY, p.Y)
	}
	yMax := niceMax(maxY)
	axes(&b, yMax, unit)
	slot := float64(chartW-padL-8) / float64(len(points))
	for i, p := range points {
		h := p.Y / yMax * (chartH - padB - 16)
		x := padL + float64(i)*slot + slot*0.15
		tip := p.Label + ": " + formatValue(p.Y, unit)
		if p.Note != "" {
			tip += " (" + p.Note + ")"
		}
		fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s</title></rect>`,
			x, chartH-padB-h, slot*0.7, h, template.HTMLEscapeString(tip))
		mid := x + slot*0.35
		if len(points) <= 12 {
			fmt.Fprintf(&b, `<text class="value" x="%.1f" y="%.1f">%s</text>`, mid, chartH-padB-h-3, formatValue(p.Y, unit))
		}
		if text := label(i); text != "" {
			fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%d">%s</text>`, mid, chartH-padB+13, template.HTMLEscapeString(text))
			if p.Note != "" {
				fmt.Fprintf(&b, `<text class="label note" x="%.1f" y="%d">%s</text>`, mid, chartH-padB+25, template.HTMLEscapeString(p.Note))
			}
		}
	}
	return finish(&b)
}

// tick is a labelled time on a time axis.
type tick struct {
	at    float64 // Unix seconds
	label string
}

// tickSteps are the time axis' steps, in seconds.
var tickSteps = []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
	86400, 2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400, 91 * 86400, 182 * 86400, 365 * 86400}

// timeTicks returns the labelled times between lo and hi (Unix
// seconds): at most five, on round times of the smallest step that fits
// (UTC, as the page's time).
func timeTicks(lo, hi float64) []tick {
	span := hi - lo
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if span/s <= 5 {
			step = s
			break
		}
	}
	layout := timeLayout(span, step)
	var ticks []tick
	for at := math.Ceil(lo/step) * step; at <= hi; at += step {
		ticks = append(ticks, tick{at: at, label: time.Unix(int64(at), 0).UTC().Format(layout)})
	}
	return ticks
}

// timeLayout is how a time axis spanning span seconds, labelled every step
// (0: irregularly), writes its times.
func timeLayout(span, step float64) string {
	switch {
	case step > 0 && step < 60 || step == 0 && span < 600:
		return "15:04:05"
	case span < 86400:
		return "15:04"
	case step < 86400 && span < 7*86400:
		return "Jan 2 15:04"
	case span < 300*86400:
		return "Jan 2"
	}
	return "2006-01-02"
}

func begin(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<figure class="chart"><figcaption>%s</figcaption><svg viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		template.HTMLEscapeString(title), chartW, chartH, template.HTMLEscapeString(title))
}

func finish(b *strings.Builder) template.HTML {
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String())
}

func empty(b *strings.Builder) {
	fmt.Fprintf(b, `<text class="empty" x="%d" y="%d">no data yet</text>`, chartW/2, chartH/2)
}

func axes(b *strings.Builder, yMax float64, unit string) {
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, chartH-padB, chartW-8, chartH-padB)
	for i := 0; i <= 4; i++ {
		v := yMax * float64(i) / 4
		y := chartH - padB - v/yMax*(chartH-padB-16)
		fmt.Fprintf(b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/><text class="tick" x="%d" y="%.1f">%s</text>`,
			padL, y, chartW-8, y, padL-6, y+4, formatValue(v, unit))
	}
}

// niceMax rounds v up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func formatValue(v float64, unit string) string {
	switch unit {
	case "bytes":
		return HumanBytes(int64(v))
	case "x":
		return fmt.Sprintf("%.2f×", v)
	case "%":
		return fmt.Sprintf("%.0f%%", v)
	}
	return fmt.Sprintf("%g", v)
}

// HumanBytes writes n in binary units ("1.5 MiB"), as the page and the
// CLI's reports show sizes.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
