package webui

import (
	"strings"
	"testing"
)

func TestCharts(t *testing.T) {
	line := string(lineChart("t", "bytes", []point{{X: 1, Y: 100}, {X: 2, Y: 300}}, []point{{X: 1, Y: 50}}))
	if strings.Count(line, "<polyline") != 2 || !strings.Contains(line, "500 B") {
		t.Errorf("line chart %s", line)
	}
	bar := string(barChart("b", "%", []point{{Y: 50, Label: "preconstruct"}, {Y: 100, Label: "prefetch"}}))
	if strings.Count(bar, `class="bar"`) != 2 || !strings.Contains(bar, ">preconstruct<") || !strings.Contains(bar, "100%") {
		t.Errorf("bar chart %s", bar)
	}
	if e := string(barChart("e", "bytes", nil)); !strings.Contains(e, "no data yet") {
		t.Errorf("empty chart %s", e)
	}
	for v, want := range map[float64]float64{0: 1, 3: 5, 7: 10, 120: 200, 1e6 + 1: 2e6} {
		if got := niceMax(v); got != want {
			t.Errorf("niceMax(%v) = %v, want %v", v, got, want)
		}
	}
	if strings.Contains(string(barChart("<x>", "", []point{{Y: 1, Label: "<script>"}})), "<script>") {
		t.Error("labels are not escaped")
	}
}
