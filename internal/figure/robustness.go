package figure

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/offline-router/offline-router/internal/replay"
)

// The robustness figure: three panels side by side, a row per fault.
const (
	robustRowH = 0.8 * vg.Inch
	robustMinH = 3.5 * vg.Inch
	robustBand = 0.6 // of a fault's row, what its contenders' marks spread over
)

// SaveRobustness draws replay --robustness to path: per fault (a row) and
// contender (a mark in its colour, its interval as an error bar), the
// change in prefix hit rate and the ratios of mean and p99 TTFT (and of
// goodput, with --goodput) against the contender's own clean run, with the
// no-change line dashed. A router
// that degrades gracefully keeps its marks near the line.
func SaveRobustness(path, title string, r *replay.RobustnessReport) error {
	if err := CheckFormat(path); err != nil {
		return err
	}
	if r == nil || len(r.Faults) == 0 || len(r.Faults[0].Contenders) == 0 {
		return fmt.Errorf("--plot %s: no fault was run", path)
	}
	named := make([]*replay.Result, len(r.Faults[0].Contenders))
	for i, c := range r.Faults[0].Contenders {
		named[i] = &replay.Result{Metrics: replay.Metrics{Policy: c.Contender}}
	}
	ss := contenders(nil, named)
	panels := []robustPanel{
		{"prefix hit rate: change (higher is better)", 0, func(c *replay.FaultChange) replay.Estimate { return c.PrefixHitRate }},
		{"mean TTFT: ratio (lower is better)", 1, func(c *replay.FaultChange) replay.Estimate { return c.MeanTTFT }},
		{"p99 TTFT: ratio (lower is better)", 1, func(c *replay.FaultChange) replay.Estimate { return c.P99TTFT }},
	}
	if r.Faults[0].Contenders[0].Goodput != nil { // with --goodput
		panels = append(panels, robustPanel{"goodput: ratio (higher is better)", 1, func(c *replay.FaultChange) replay.Estimate { return *c.Goodput }})
	}
	var plots []*plot.Plot
	for k, pn := range panels {
		p, err := robustnessPlot(r, ss, pn.title, pn.ref, pn.get, k == 0)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	h := newHead(title, ss)
	panelH := max(vg.Length(len(r.Faults))*robustRowH, robustMinH)
	canvas := newCanvas(path, figWidth, margin+h.height()+panelH+margin)
	body := draw.Crop(draw.New(canvas), margin, -margin, margin, -margin)
	top := h.draw(body)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: 0.4 * vg.Inch, PadRight: 0.1 * vg.Inch}
	grid := [][]*plot.Plot{plots}
	for j, c := range plot.Align(grid, tiles, band(body, top, panelH))[0] {
		grid[0][j].Draw(c)
	}
	return saveCanvas(path, canvas)
}

// robustPanel is one panel's figure: its title, its no-change value and
// how a change gives it.
type robustPanel struct {
	title string
	ref   float64
	get   func(c *replay.FaultChange) replay.Estimate
}

// robustnessPlot is one panel: a row per fault, first on top, the
// contenders' marks spread across it; names says whether it labels the
// rows.
func robustnessPlot(r *replay.RobustnessReport, ss []series, title string, ref float64,
	get func(c *replay.FaultChange) replay.Estimate, names bool) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	n := len(r.Faults)
	lo, hi := ref, ref
	for i, f := range r.Faults {
		row := float64(n - 1 - i)
		for j := range f.Contenders {
			e := get(&f.Contenders[j])
			if math.IsInf(e.Mean, 0) || math.IsNaN(e.Mean) || e.Mean == math.MaxFloat64 {
				continue
			}
			y := row + robustBand*(0.5-float64(j+1)/float64(len(f.Contenders)+1))
			ci := [2]float64{e.Mean, e.Mean}
			if e.CI95 != nil {
				ci = *e.CI95
			}
			lo, hi = math.Min(lo, ci[0]), math.Max(hi, ci[1])
			eb, err := plotter.NewXErrorBars(intervals{{y: y, ratio: e.Mean, lo: ci[0], hi: ci[1]}})
			if err != nil {
				return nil, err
			}
			eb.LineStyle.Color, eb.LineStyle.Width, eb.CapWidth = ss[j].color, 1.5, 6
			sc, err := plotter.NewScatter(plotter.XYs{{X: e.Mean, Y: y}})
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: ss[j].color, Radius: 4, Shape: draw.CircleGlyph{}}
			p.Add(eb, sc)
		}
	}
	line, err := plotter.NewLine(plotter.XYs{{X: ref, Y: -0.6}, {X: ref, Y: float64(n) - 0.4}})
	if err != nil {
		return nil, err
	}
	line.Color, line.Dashes, line.Width = color.Gray{0x80}, []vg.Length{4, 3}, 0.75
	p.Add(plotter.NewGrid(), line)
	span := math.Max(hi-lo, 0.02)
	p.X.Min, p.X.Max = lo-0.1*span, hi+0.1*span
	p.X.Tick.Marker = niceTicks{}
	labels := make([]string, n)
	if names {
		for i, f := range r.Faults {
			labels[n-1-i] = f.Name
		}
	}
	p.NominalY(labels...)
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	p.Y.Tick.Label.Font.Size = legendSize
	return p, nil
}
