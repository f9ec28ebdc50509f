package webui

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// Charts are drawn on the server as inline SVG: nothing to build or load,
// and the page stays small.

// point is one value of a series at x (any unit; the chart scales).
type point struct {
	X, Y  float64
	Label string // the x axis label under a bar
}

const (
	chartW, chartH = 560, 180
	padL, padB     = 56, 28
)

// lineChart plots series (one line each, in classes c0, c1, ...) against
// a shared y scale starting at 0.
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
	open(&b, title)
	if n == 0 {
		empty(&b)
		return close(&b)
	}
	if maxX == minX {
		minX--
		maxX++
	}
	yMax := niceMax(maxY)
	axes(&b, yMax, unit)
	for i, s := range series {
		var pts []string
		for _, p := range s {
			x := padL + (p.X-minX)/(maxX-minX)*(chartW-padL-8)
			y := chartH - padB - p.Y/yMax*(chartH-padB-16)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		fmt.Fprintf(&b, `<polyline class="line c%d" points="%s"/>`, i, strings.Join(pts, " "))
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle class="dot c%d" cx="%s" cy="%s" r="2.5"/>`, i, xy[0], xy[1])
		}
	}
	return close(&b)
}

// barChart draws one bar per point.
func barChart(title, unit string, points []point) template.HTML {
	var b strings.Builder
	open(&b, title)
	if len(points) == 0 {
		empty(&b)
		return close(&b)
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
		fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %s</title></rect>`,
			x, chartH-padB-h, slot*0.7, h, template.HTMLEscapeString(p.Label), formatValue(p.Y, unit))
		if len(points) <= 12 {
			fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%d">%s</text>`, x+slot*0.35, chartH-padB+14, template.HTMLEscapeString(p.Label))
		}
	}
	return close(&b)
}

func open(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<figure class="chart"><figcaption>%s</figcaption><svg viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		template.HTMLEscapeString(title), chartW, chartH, template.HTMLEscapeString(title))
}

func close(b *strings.Builder) template.HTML {
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
