package figure

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/offline-router/offline-router/internal/replay"
)

// The capacity figure's geometry: two panels side by side.
const (
	loadPanelH = 5.5 * vg.Inch
	p99Dash    = 6 // points of dash and 3 of gap: p99's line against p50's solid one
)

// SaveCapacity draws the capacity search (replay --capacity) to path: for
// every contender, against the offered load of its probes, TTFT p50
// (solid) and p99 (dashed) on the left and SLO attainment on the right,
// with the attainment target and each contender's sustainable rate (a
// dotted line in its colour, in both panels).
func SaveCapacity(path, title string, r *replay.CapacityReport, slo replay.SLO) error {
	if err := CheckFormat(path); err != nil {
		return err
	}
	if r == nil || len(r.Contenders) == 0 {
		return fmt.Errorf("--plot %s: no capacity was searched", path)
	}
	ss := capacitySeries(r)
	ttft, att, err := loadPlots(r, ss, slo)
	if err != nil {
		return err
	}
	titleStyle, legendStyle, keyStyle := textStyle(titleSize), textStyle(legendSize), textStyle(11)
	lines := legendLines(ss, legendStyle, figWidth-2*margin)
	lineH := legendStyle.Height("Xg") * 1.5
	key := fmt.Sprintf("solid: TTFT p50; dashed: p99; grey dashed: the TTFT level and the attainment target; dotted upright: each contender's sustainable rate, the highest probed with attainment >= %.3g", r.AttainmentTarget)
	headH := titleStyle.Height(title)*1.4 + vg.Length(len(lines))*lineH + keyStyle.Height(key)*1.6 + legendGap
	height := margin + headH + loadPanelH + margin

	canvas := newCanvas(path, figWidth, height)
	body := draw.Crop(draw.New(canvas), margin, -margin, margin, -margin)
	top := body.Max.Y
	center := (body.Min.X + body.Max.X) / 2
	titleStyle.XAlign, titleStyle.YAlign = draw.XCenter, draw.YTop
	body.FillText(titleStyle, vg.Point{X: center, Y: top}, title)
	top -= titleStyle.Height(title) * 1.4
	for _, line := range lines {
		drawLegendLine(body, legendStyle, line, top-lineH/2)
		top -= lineH
	}
	keyStyle.XAlign, keyStyle.YAlign = draw.XCenter, draw.YTop
	body.FillText(keyStyle, vg.Point{X: center, Y: top}, key)
	top -= keyStyle.Height(key)*1.6 + legendGap
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: 0.5 * vg.Inch, PadRight: 0.1 * vg.Inch}
	grid := [][]*plot.Plot{{ttft, att}}
	for j, c := range plot.Align(grid, tiles, band(body, top, loadPanelH))[0] {
		grid[0][j].Draw(c)
	}
	return saveCanvas(path, canvas)
}

// capacitySeries names and colours the contenders as every figure does.
func capacitySeries(r *replay.CapacityReport) []series {
	named := make([]*replay.Result, len(r.Contenders))
	for i, c := range r.Contenders {
		named[i] = &replay.Result{Metrics: replay.Metrics{Policy: c.Name}}
	}
	return contenders(nil, named)
}

// byRate is a contender's probes in order of offered rate, as the lines
// join them (the search tried them in its own order).
func byRate(c *replay.CapacityResult) []replay.CapacityProbe {
	return slices.SortedFunc(slices.Values(c.Probes), func(a, b replay.CapacityProbe) int { return cmp.Compare(a.OfferedRate, b.OfferedRate) })
}

// loadPlots are the two panels: TTFT percentiles on a log axis (p99 past
// capacity is minutes where p50 below it is milliseconds) and attainment.
func loadPlots(r *replay.CapacityReport, ss []series, slo replay.SLO) (ttft, att *plot.Plot, err error) {
	ttft, att = plot.New(), plot.New()
	ttft.Title.Text = "Time to first token against offered load"
	ttft.X.Label.Text, att.X.Label.Text = "offered load (requests/s)", "offered load (requests/s)"
	ttft.Y.Label.Text = "TTFT (ms, log scale)"
	ttft.Y.Scale, ttft.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	att.Title.Text = "SLO attainment against offered load (" + slo.Describe() + ")"
	att.Y.Label.Text = "requests meeting every level / requests offered"
	ttft.X.Tick.Marker, att.X.Tick.Marker = niceTicks{}, niceTicks{}
	lo, hi, maxRate := math.Inf(1), 0.0, 0.0
	for i := range r.Contenders {
		for _, p := range r.Contenders[i].Probes {
			for _, v := range []float64{p.MedianTTFTMS, p.P99TTFTMS} {
				if v > 0 {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
			maxRate = math.Max(maxRate, p.OfferedRate)
		}
	}
	if hi == 0 { // no request completed at any probe
		lo, hi = 1, 10
	}
	lo, hi = lo/1.5, hi*1.5
	for i := range r.Contenders {
		c, s := &r.Contenders[i], ss[i]
		probes := byRate(c)
		p50, p99, share := make(plotter.XYs, 0, len(probes)), make(plotter.XYs, 0, len(probes)), make(plotter.XYs, len(probes))
		for k, p := range probes {
			if p.MedianTTFTMS > 0 { // a log axis has no 0
				p50 = append(p50, plotter.XY{X: p.OfferedRate, Y: p.MedianTTFTMS})
			}
			if p.P99TTFTMS > 0 {
				p99 = append(p99, plotter.XY{X: p.OfferedRate, Y: p.P99TTFTMS})
			}
			share[k] = plotter.XY{X: p.OfferedRate, Y: p.Attainment.Mean}
		}
		for _, l := range []struct {
			p    *plot.Plot
			pts  plotter.XYs
			dash []vg.Length
		}{{ttft, p50, nil}, {ttft, p99, []vg.Length{p99Dash, 3}}, {att, share, nil}} {
			if len(l.pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(l.pts)
			if err != nil {
				return nil, nil, err
			}
			line.Color, line.Width, line.Dashes = s.color, 2, l.dash
			points.Color, points.Shape, points.Radius = s.color, draw.CircleGlyph{}, 3
			l.p.Add(line, points)
		}
		if c.SustainableRate > 0 {
			for _, m := range []struct {
				p      *plot.Plot
				lo, hi float64
			}{{ttft, lo, hi}, {att, 0, 1}} {
				mark, err := plotter.NewLine(plotter.XYs{{X: c.SustainableRate, Y: m.lo}, {X: c.SustainableRate, Y: m.hi}})
				if err != nil {
					return nil, nil, err
				}
				mark.Color, mark.Width, mark.Dashes = s.color, 1.5, []vg.Length{2, 3}
				m.p.Add(mark)
			}
		}
	}
	target, err := plotter.NewLine(plotter.XYs{{X: 0, Y: r.AttainmentTarget}, {X: maxRate * 1.05, Y: r.AttainmentTarget}})
	if err != nil {
		return nil, nil, err
	}
	target.Color, target.Width, target.Dashes = color.Gray{0x55}, 1.5, []vg.Length{8, 4}
	label, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: 0, Y: r.AttainmentTarget}},
		Labels: []string{fmt.Sprintf(" target %.3g", r.AttainmentTarget)}})
	if err != nil {
		return nil, nil, err
	}
	label.Offset = vg.Point{Y: 3}
	att.Add(target, label)
	if slo.TTFTMS > 0 && slo.TTFTMS > lo && slo.TTFTMS < hi { // the TTFT level, where the axis holds it
		level, err := plotter.NewLine(plotter.XYs{{X: 0, Y: slo.TTFTMS}, {X: maxRate * 1.05, Y: slo.TTFTMS}})
		if err != nil {
			return nil, nil, err
		}
		level.Color, level.Width, level.Dashes = color.Gray{0x55}, 1.5, []vg.Length{8, 4}
		ttft.Add(level)
	}
	for _, p := range []*plot.Plot{ttft, att} {
		p.X.Min, p.X.Max = 0, maxRate*1.05
		p.Add(plotter.NewGrid())
	}
	ttft.Y.Min, ttft.Y.Max = lo, hi
	att.Y.Min, att.Y.Max = 0, 1
	att.Y.Tick.Marker = plot.ConstantTicks(fractionTicks())
	return ttft, att, nil
}
