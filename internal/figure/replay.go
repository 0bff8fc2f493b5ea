package figure

import (
	"fmt"
	"image"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

// The figure's geometry. Its width is fixed; its height grows with the
// heatmaps, one per policy.
const (
	figWidth   = 14 * vg.Inch
	titleSize  = 16
	legendSize = 12
	panelRowH  = 3.3 * vg.Inch // each of the two rows of summary panels
	heatRowH   = 1.8 * vg.Inch
	colorBarW  = 1.3 * vg.Inch
	margin     = 0.2 * vg.Inch
	windows    = 60 // about this many time windows over the longest run
)

// seriesColors tells up to 16 policies apart (Tableau 10, then six more
// hues far from those); plotutil's palette repeats after 7.
var seriesColors = []color.RGBA{
	{0x4e, 0x79, 0xa7, 255}, {0xf2, 0x8e, 0x2b, 255}, {0xe1, 0x57, 0x59, 255}, {0x76, 0xb7, 0xb2, 255},
	{0x59, 0xa1, 0x4f, 255}, {0xed, 0xc9, 0x48, 255}, {0xb0, 0x7a, 0xa1, 255}, {0xff, 0x9d, 0xa7, 255},
	{0x9c, 0x75, 0x5f, 255}, {0xba, 0xb0, 0xac, 255}, {0x22, 0x22, 0x22, 255}, {0x1f, 0x2f, 0x7a, 255},
	{0xc5, 0x1b, 0x7d, 255}, {0xb6, 0x99, 0x2d, 255}, {0xa6, 0xd8, 0x54, 255}, {0x00, 0xa6, 0xd6, 255},
}

// policyColor gives a policy the same colour in every figure: its place
// among the router's policies.
func policyColor(name string) color.RGBA {
	return seriesColors[max(slices.Index(protocol.Policies, protocol.Policy(name)), 0)%len(seriesColors)]
}

// series is one contender as every panel draws it: its name, its colour
// and its run.
type series struct {
	name  string
	color color.RGBA
	*replay.Result
}

// contenders names each result by its contender in the report (by the
// policy it ran without one) and colours it: a contender named after a
// policy takes the policy's colour, as in every figure; any other (kv with
// overrides, say) takes the first colour no other contender of the figure
// has, so that two runs of one policy are told apart.
func contenders(rep *replay.Report, results []*replay.Result) []series {
	out := make([]series, len(results))
	taken := map[color.RGBA]bool{}
	for i, r := range results {
		out[i] = series{name: r.Metrics.Policy, Result: r}
		if rep != nil && len(rep.Deterministic.Contenders) == len(results) {
			out[i].name = rep.Deterministic.Contenders[i].Name
		}
		if slices.Contains(protocol.Policies, protocol.Policy(out[i].name)) {
			out[i].color = policyColor(out[i].name)
			taken[out[i].color] = true
		}
	}
	next := 0
	for i := range out {
		if slices.Contains(protocol.Policies, protocol.Policy(out[i].name)) {
			continue
		}
		for taken[seriesColors[next%len(seriesColors)]] && next < 2*len(seriesColors) {
			next++ // past 16 contenders, colours repeat
		}
		out[i].color = seriesColors[next%len(seriesColors)]
		taken[out[i].color] = true
	}
	return out
}

// SaveReplay draws the replay's figure to path (.png or .svg by extension).
// From the top: the title and one legend of the policies' colours, which
// every panel shares; hit rate and TTFT percentiles per policy; the TTFT
// distribution and the hit rate over time; one heatmap of per-worker load
// per policy, on one colour scale.
func SaveReplay(path, title string, rep *replay.Report, results []*replay.Result) error {
	if err := CheckFormat(path); err != nil {
		return err
	}
	if len(results) == 0 {
		return fmt.Errorf("--plot %s: no policy ran", path)
	}
	ss := contenders(rep, results)
	// One set of windows for every policy, sized on the longest run.
	end := 0.0
	for _, r := range results {
		end = math.Max(end, r.End())
	}
	width := niceStep(math.Max(end, 1) / windows)
	n := max(1, int(math.Ceil(end/width)))
	tu := timeUnitFor(float64(n) * width)

	hit, ttft, err := barPlots(ss)
	if err != nil {
		return err
	}
	if rep != nil {
		if err := addHitBounds(hit, rep.Deterministic.Headroom, len(ss)); err != nil {
			return err
		}
	}
	cdf, err := cdfPlot(ss)
	if err != nil {
		return err
	}
	overTime, err := hitRatePlot(ss, width, n, tu)
	if err != nil {
		return err
	}
	heats, bar := heatPlots(ss, width, n, tu)
	cmp := comparisonOf(rep, ss)
	var cmpPlots []*plot.Plot
	cmpH := vg.Length(0)
	if cmp != nil {
		if cmpPlots, err = cmp.plots(); err != nil {
			return err
		}
		cmpH = cmp.height()
	}

	// Layout, top to bottom, in canvas coordinates (y grows upwards).
	h := newHead(title, ss)
	heatCols := heatColumns(len(results))
	heatRows := (len(results) + heatCols - 1) / heatCols
	// At least tall enough for the colour bar and its label beside it.
	heatH := max(vg.Length(heatRows)*heatRowH, 2.8*vg.Inch)
	height := margin + h.height() + cmpH + 2*panelRowH + heatH + margin

	canvas := newCanvas(path, figWidth, height)
	body := draw.Crop(draw.New(canvas), margin, -margin, margin, -margin)
	top := h.draw(body)

	if cmp != nil {
		drawComparison(body, top, cmp, cmpPlots, rep)
		top -= cmpH
	}

	panels := band(body, top, 2*panelRowH)
	top -= 2 * panelRowH
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: 0.5 * vg.Inch, PadY: 0.3 * vg.Inch, PadRight: 0.1 * vg.Inch}
	grid := [][]*plot.Plot{{hit, ttft}, {cdf, overTime}}
	for i, row := range plot.Align(grid, tiles, panels) {
		for j, c := range row {
			grid[i][j].Draw(c)
		}
	}

	heatBand := band(body, top, heatH)
	maps := draw.Crop(heatBand, 0, -colorBarW, 0, 0)
	cells := make([][]*plot.Plot, heatRows)
	for i := range cells {
		cells[i] = make([]*plot.Plot, heatCols)
		for j := range cells[i] {
			if k := i*heatCols + j; k < len(heats) {
				cells[i][j] = heats[k]
			}
		}
	}
	tiles = draw.Tiles{Rows: heatRows, Cols: heatCols, PadX: 0.5 * vg.Inch, PadY: 0.15 * vg.Inch, PadTop: 0.25 * vg.Inch}
	for i, row := range plot.Align(cells, tiles, maps) {
		for j, c := range row {
			if cells[i][j] != nil {
				cells[i][j].Draw(c)
			}
		}
	}
	// The colour bar stands beside the heatmaps, from the top of the first,
	// no taller than 4 inches so that its scale stays fine-grained.
	barH := min(heatH, 4*vg.Inch)
	bar.Draw(draw.Crop(heatBand, heatBand.Max.X-heatBand.Min.X-colorBarW+0.3*vg.Inch, 0,
		heatH-barH+0.3*vg.Inch, -0.45*vg.Inch))
	return saveCanvas(path, canvas)
}

// drawComparison draws the comparison row from y = top down: its title,
// naming the baseline, what the marks mean, and the panels side by side.
func drawComparison(body draw.Canvas, top vg.Length, cmp *comparison, plots []*plot.Plot, rep *replay.Report) {
	center := (body.Min.X + body.Max.X) / 2
	head, sub := textStyle(13), textStyle(11)
	head.XAlign, head.YAlign = draw.XCenter, draw.YTop
	sub.XAlign, sub.YAlign = draw.XCenter, draw.YTop
	line := "Against the baseline " + cmp.baseline + ": each contender's ratio to it, with its 95% interval (each for its own comparison)"
	body.FillText(head, vg.Point{X: center, Y: top}, line)
	used := head.Height(line) * 1.4
	if d := &rep.Deterministic; d.Repeats > 1 && len(d.Seeds) > 0 {
		note := fmt.Sprintf("The ratios pool the requests of %d repeats; the panels below show repeat 0 alone (seed %d).", d.Repeats, d.Seeds[0])
		body.FillText(sub, vg.Point{X: center, Y: top - used}, note)
		used += sub.Height(note) * 1.4
	}
	key := textStyle(11)
	drawVerdictKey(body, key, top-used-key.Height("Xg")/2, cmp.baseline)
	used += key.Height("Xg") * 1.6
	panels := band(body, top-used, cmp.height()-used-0.3*vg.Inch)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: 0.35 * vg.Inch, PadRight: 0.1 * vg.Inch}
	for j, c := range plot.Align([][]*plot.Plot{plots}, tiles, panels)[0] {
		plots[j].Draw(c)
	}
}

// heatColumns lays out up to four heatmaps one above the other, on one
// time axis, and more in two columns so that the figure stays readable.
func heatColumns(policies int) int {
	if policies > 4 {
		return 2
	}
	return 1
}

// band is the full-width strip of c from y = top down by h.
func band(c draw.Canvas, top, h vg.Length) draw.Canvas {
	return draw.Crop(c, 0, 0, top-h-c.Min.Y, top-c.Max.Y)
}

func textStyle(size vg.Length) text.Style {
	return text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, size), Handler: plot.DefaultTextHandler}
}

// Legend entries: a colour swatch and the policy's name, laid out in rows
// across the figure, above every panel, so that no data is hidden.
const (
	swatchW   = 22
	swatchH   = 10
	entryGap  = 24
	legendGap = 0.15 * vg.Inch // between the legend and the panels' titles
)

// head is a figure's title and the one legend of its contenders' colours
// that every panel shares, at its top.
type head struct {
	title        string
	lines        [][]legendEntry
	titleStyle   text.Style
	legendStyle  text.Style
	lineH, headH vg.Length
}

func newHead(title string, ss []series) head {
	h := head{title: title, titleStyle: textStyle(titleSize), legendStyle: textStyle(legendSize)}
	h.lines = legendLines(ss, h.legendStyle, figWidth-2*margin)
	h.lineH = h.legendStyle.Height("Xg") * 1.5
	h.headH = h.titleStyle.Height(title)*1.4 + vg.Length(len(h.lines))*h.lineH
	return h
}

// height is the head's, with the gap below it.
func (h head) height() vg.Length { return h.headH + legendGap }

// draw draws the head at the top of body and returns the height below
// it, the gap taken.
func (h head) draw(body draw.Canvas) vg.Length {
	top := body.Max.Y
	sty := h.titleStyle
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
	body.FillText(sty, vg.Point{X: (body.Min.X + body.Max.X) / 2, Y: top}, h.title)
	top -= h.titleStyle.Height(h.title) * 1.4
	for _, line := range h.lines {
		drawLegendLine(body, h.legendStyle, line, top-h.lineH/2)
		top -= h.lineH
	}
	return top - legendGap
}

type legendEntry struct {
	name  string
	color color.Color
	width vg.Length
}

// legendLines wraps the entries into rows no wider than width.
func legendLines(ss []series, sty text.Style, width vg.Length) [][]legendEntry {
	var lines [][]legendEntry
	var line []legendEntry
	used := vg.Length(0)
	for _, s := range ss {
		e := legendEntry{s.name, s.color, swatchW + 6 + sty.Width(s.name)}
		if len(line) > 0 && used+entryGap+e.width > width {
			lines, line, used = append(lines, line), nil, 0
		}
		if len(line) > 0 {
			used += entryGap
		}
		line, used = append(line, e), used+e.width
	}
	return append(lines, line)
}

// drawLegendLine draws one row of entries centred on c at height y.
func drawLegendLine(c draw.Canvas, sty text.Style, line []legendEntry, y vg.Length) {
	total := vg.Length(entryGap * (len(line) - 1))
	for _, e := range line {
		total += e.width
	}
	x := (c.Min.X + c.Max.X - total) / 2
	sty.YAlign = draw.YCenter
	for _, e := range line {
		var box vg.Path
		box.Move(vg.Point{X: x, Y: y - swatchH/2})
		box.Line(vg.Point{X: x + swatchW, Y: y - swatchH/2})
		box.Line(vg.Point{X: x + swatchW, Y: y + swatchH/2})
		box.Line(vg.Point{X: x, Y: y + swatchH/2})
		box.Close()
		c.SetColor(e.color)
		c.Fill(box)
		c.FillText(sty, vg.Point{X: x + swatchW + 6, Y: y}, e.name)
		x += e.width + entryGap
	}
}

// addHitBounds draws across the hit-rate bars the infinite-cache bound
// (no router passes it) and one cluster-sized LRU cache's rate (a
// reference), n bars high.
func addHitBounds(p *plot.Plot, h *replay.Headroom, n int) error {
	if h == nil {
		return nil
	}
	refs := []struct {
		at    float64
		label string
		dash  []vg.Length
		y     float64
	}{{h.InfiniteCacheHitRate, "infinite cache", []vg.Length{2, 2}, float64(n) - 0.45},
		{h.ClusterLRUHitRate, "cluster LRU", []vg.Length{6, 3}, -0.55}}
	if math.Abs(h.InfiniteCacheHitRate-h.ClusterLRUHitRate) < 5e-4 {
		refs = refs[:1]
		refs[0].label = "infinite cache = cluster LRU"
	}
	for _, r := range refs {
		line, err := plotter.NewLine(plotter.XYs{{X: r.at, Y: -0.5}, {X: r.at, Y: float64(n) - 0.5}})
		if err != nil {
			return err
		}
		line.Color, line.Dashes, line.Width = color.RGBA{0x40, 0x40, 0x90, 255}, r.dash, 1
		label, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: r.at, Y: r.y}}, Labels: []string{r.label}})
		if err != nil {
			return err
		}
		label.TextStyle[0] = textStyle(9)
		label.TextStyle[0].XAlign = draw.XCenter
		p.Add(line, label)
	}
	return nil
}

// barPlots draws per policy the prefix hit rate, and TTFT p50 (pale) and
// p99 (solid), as horizontal bars, first policy on top so that names of
// any length fit. Each bar carries its value, so that close policies are
// still told apart.
func barPlots(ss []series) (hit, ttft *plot.Plot, err error) {
	n := len(ss)
	hit, ttft = plot.New(), plot.New()
	hit.Title.Text = "Prefix hit rate (higher is better)"
	hit.X.Label.Text = "cached input tokens / input tokens"
	ttft.Title.Text = "Time to first token, p50 and p99 (lower is better)"
	ttft.X.Label.Text = "TTFT (ms)"
	// Bar thickness is in points: share the panel's height between policies.
	slot := min(0.7*vg.Inch, 2.2*vg.Inch/vg.Length(n))
	names := make([]string, n)
	var hitAt, ttftAt plotter.XYLabels
	worst := 0.0
	for i, s := range ss {
		m := s.Metrics
		y := float64(n - 1 - i)
		names[n-1-i] = s.name
		c := s.color
		pale := color.RGBA{c.R/2 + 128, c.G/2 + 128, c.B/2 + 128, 255}
		for _, b := range []struct {
			p      *plot.Plot
			v      float64
			c      color.Color
			offset vg.Length
			width  vg.Length
		}{
			{hit, m.PrefixHitRate, c, 0, 0.6 * slot},
			{ttft, m.MedianTTFTMS, pale, 0.2 * slot, 0.38 * slot},
			{ttft, m.P99TTFTMS, c, -0.2 * slot, 0.38 * slot},
		} {
			bc, err := plotter.NewBarChart(plotter.Values{b.v}, b.width)
			if err != nil {
				return nil, nil, err
			}
			bc.Horizontal, bc.XMin, bc.Offset, bc.Color = true, y, b.offset, b.c
			bc.LineStyle.Width = 0
			b.p.Add(bc)
		}
		hitAt.XYs = append(hitAt.XYs, plotter.XY{X: m.PrefixHitRate, Y: y})
		hitAt.Labels = append(hitAt.Labels, fmt.Sprintf("%.3f", m.PrefixHitRate))
		// One label per policy, past the longer bar: two would collide
		// when eight policies share the panel.
		ttftAt.XYs = append(ttftAt.XYs, plotter.XY{X: math.Max(m.MedianTTFTMS, m.P99TTFTMS), Y: y})
		label := fmt.Sprintf("p50 %s, p99 %s", formatMS(m.MedianTTFTMS), formatMS(m.P99TTFTMS))
		if m.Rejected > 0 { // the latencies are of completed requests only: say what they leave out
			label += fmt.Sprintf(" (%d rejected)", m.Rejected)
		}
		ttftAt.Labels = append(ttftAt.Labels, label)
		worst = math.Max(worst, m.P99TTFTMS)
	}
	for _, l := range []struct {
		p  *plot.Plot
		at plotter.XYLabels
	}{{hit, hitAt}, {ttft, ttftAt}} {
		labels, err := plotter.NewLabels(l.at)
		if err != nil {
			return nil, nil, err
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i].YAlign = draw.YCenter
		}
		labels.Offset = vg.Point{X: 4}
		l.p.Add(labels)
	}
	hit.NominalY(names...)
	ttft.NominalY(names...)
	// Room on the right for the values written past the bars' ends.
	hit.X.Min, hit.X.Max = 0, 1.18
	hit.X.Tick.Marker = plot.ConstantTicks(fractionTicks())
	ttft.X.Min, ttft.X.Max = 0, math.Max(worst, 1)*1.5
	ttft.X.Tick.Marker = niceTicks{}
	for _, p := range []*plot.Plot{hit, ttft} {
		p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
		p.Y.Tick.Label.Font.Size = legendSize
	}
	return hit, ttft, nil
}

func fractionTicks() []plot.Tick {
	var ts []plot.Tick
	for i := range 11 {
		t := plot.Tick{Value: float64(i) / 10}
		if i%2 == 0 {
			t.Label = fmt.Sprintf("%.1f", t.Value)
		}
		ts = append(ts, t)
	}
	return ts
}

// formatMS writes a latency with three significant digits or more.
func formatMS(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// cdfPlot draws each policy's TTFT distribution, on a log axis when it
// spans more than two decades, where a linear one would crush the body of
// the distribution against the axis to show the tail.
func cdfPlot(ss []series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "TTFT distribution (further left is better)"
	p.Y.Label.Text = "fraction of requests with TTFT at most x"
	all := make([][]float64, len(ss))
	lo, hi := math.Inf(1), 0.0
	for i, s := range ss {
		all[i] = s.TTFTs()
		for _, v := range all[i] {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	logX := hi > 0 && hi/lo > 100
	p.X.Label.Text = "TTFT (ms)"
	p.X.Tick.Marker = niceTicks{}
	if logX {
		p.X.Label.Text = "TTFT (ms, log scale)"
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	for i, ts := range all {
		if len(ts) == 0 {
			continue
		}
		// At most 200 points, evenly spaced in rank: the curve keeps its
		// shape and the SVG stays small whatever the number of requests.
		k := min(200, len(ts))
		pts := make(plotter.XYs, k)
		for j := range pts {
			idx := len(ts) - 1
			if k > 1 {
				idx = j * (len(ts) - 1) / (k - 1)
			}
			x := ts[idx]
			if logX {
				x = math.Max(x, lo) // a log axis has no 0
			}
			pts[j] = plotter.XY{X: x, Y: float64(idx+1) / float64(len(ts))}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.Color, line.Width = ss[i].color, 2
		p.Add(line)
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = plot.ConstantTicks(fractionTicks())
	p.Add(plotter.NewGrid())
	return p, nil
}

// hitRatePlot draws each policy's prefix hit rate per time window: unlike
// the running rate, it shows when the cache warms up and when a policy
// loses it. A window in which no request started breaks the line.
func hitRatePlot(ss []series, width float64, n int, tu timeUnit) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Prefix hit rate per %s window", formatWindow(width))
	p.X.Label.Text = "simulated time (" + tu.name + ")"
	p.Y.Label.Text = "prefix hit rate"
	for _, s := range ss {
		var run plotter.XYs
		flush := func() error {
			if len(run) == 0 {
				return nil
			}
			lp, sc, err := plotter.NewLinePoints(run)
			if err != nil {
				return err
			}
			lp.Color, lp.Width = s.color, 1.5
			sc.Color, sc.GlyphStyle.Radius, sc.Shape = s.color, 1.5, draw.CircleGlyph{}
			p.Add(lp, sc)
			run = nil
			return nil
		}
		for w, v := range s.HitRateByWindow(width, n) {
			if math.IsNaN(v) {
				if err := flush(); err != nil {
					return nil, err
				}
				continue
			}
			run = append(run, plotter.XY{X: (float64(w) + 0.5) * width / tu.ms, Y: v})
		}
		if err := flush(); err != nil {
			return nil, err
		}
	}
	p.X.Min, p.X.Max = 0, float64(n)*width/tu.ms
	p.X.Tick.Marker = niceTicks{}
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = plot.ConstantTicks(fractionTicks())
	p.Add(plotter.NewGrid())
	return p, nil
}

// heatPlots draws per policy a heatmap of the time-averaged requests on
// each worker per window, all on one colour scale, and the colour bar that
// reads it: the eye compares the policies' balance at a glance, where 64
// overlapping lines would not.
func heatPlots(ss []series, width float64, n int, tu timeUnit) ([]*plot.Plot, *plot.Plot) {
	loads := make([][][]float64, len(ss))
	peak := 0.0
	for i, s := range ss {
		loads[i] = s.LoadByWindow(width, n)
		for _, row := range loads[i] {
			for _, v := range row {
				peak = math.Max(peak, v)
			}
		}
	}
	if peak == 0 {
		peak = 1 // the colour bar needs a range
	}
	// White for an idle worker, darker as its queue grows.
	cmap := palette.Reverse(moreland.ExtendedBlackBody())
	cmap.SetMin(0)
	cmap.SetMax(peak)
	xmax := float64(n) * width / tu.ms
	plots := make([]*plot.Plot, len(ss))
	for i, s := range ss {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s: requests on each worker (request share CV %.2f)", s.name, s.Metrics.WorkerShareCV)
		if i+heatColumns(len(ss)) >= len(ss) { // the lowest heatmap of its column
			p.X.Label.Text = "simulated time (" + tu.name + ")"
		}
		p.Y.Label.Text = "worker"
		if s.Workers > 0 {
			p.Add(plotter.NewImage(heatImage(loads[i], cmap), 0, 0.5, xmax, float64(s.Workers)+0.5))
		}
		p.X.Min, p.X.Max = 0, xmax
		p.X.Tick.Marker = niceTicks{}
		p.Y.Min, p.Y.Max = 0.5, float64(max(s.Workers, 1))+0.5
		p.Y.Tick.Marker = plot.ConstantTicks(workerTicks(s.Workers, 8))
		if pools := s.Metrics.Pools; len(pools) == 2 && len(pools[0].WorkerRequests)+len(pools[1].WorkerRequests) == s.Workers {
			// Disaggregated: the prefill pool's ranks below, the decode
			// pool's above, a line between.
			prefill := len(pools[0].WorkerRequests)
			p.Title.Text = fmt.Sprintf("%s: requests on each worker, P prefill and D decode (request share CV %.2f)", s.name, s.Metrics.WorkerShareCV)
			p.Y.Tick.Marker = plot.ConstantTicks(poolTicks(prefill, s.Workers-prefill))
			sep, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(prefill) + 0.5}, {X: xmax, Y: float64(prefill) + 0.5}})
			if err == nil { // two finite points: it cannot fail
				sep.Color, sep.Width = color.Black, 1.5
				p.Add(sep)
			}
		}
		plots[i] = p
	}
	bar := plot.New()
	bar.Add(&plotter.ColorBar{ColorMap: cmap, Vertical: true})
	bar.HideX()
	bar.Y.Tick.Marker = niceTicks{}
	bar.Y.Label.Text = "requests on worker (time average)"
	bar.Y.Padding = 0
	return plots, bar
}

// heatImage paints load[worker][window], worker 1 at the bottom. Each cell
// is a block of pixels, not one pixel (as plotter.HeatMap's raster is):
// vgimg and SVG viewers smooth a scaled-up image, which would blur
// neighbouring workers into each other. A raster rather than one rectangle
// per cell keeps the SVG small at 64 workers × 60 windows × 8 policies.
func heatImage(load [][]float64, cmap palette.ColorMap) image.Image {
	workers, n := len(load), len(load[0])
	cw, ch := max(1, 1200/n), max(1, 360/workers)
	img := image.NewRGBA(image.Rect(0, 0, n*cw, workers*ch))
	for w, row := range load {
		for t, v := range row {
			c, err := cmap.At(math.Min(math.Max(v, cmap.Min()), cmap.Max()))
			if err != nil {
				c = color.Black
			}
			for y := (workers - 1 - w) * ch; y < (workers-w)*ch; y++ {
				for x := t * cw; x < (t+1)*cw; x++ {
					img.Set(x, y, c)
				}
			}
		}
	}
	return img
}

// niceTicks labels a linear axis every 1, 2 or 5 × 10^k, about six times,
// with no more decimals than the step needs (gonum's default ticker gives
// three labels, written as 2500.00).
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 4, 64)}}
	}
	step := niceStep((hi - lo) / 6)
	decimals := max(0, -int(math.Floor(math.Log10(step))))
	var ts []plot.Tick
	for k := math.Ceil(lo / step); k*step <= hi+step*1e-9; k++ {
		v := k*step + 0 // +0 for a tick at -0: "0", not "-0"
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', decimals, 64)})
	}
	return ts
}

// workerTicks labels workers 1 to n with at most about most labels.
func workerTicks(n, most int) []plot.Tick {
	step := 1
	for _, s := range []int{2, 5, 10, 20, 50, 100, 200, 500, 1000} {
		if n/step <= most {
			break
		}
		step = s
	}
	var ts []plot.Tick
	if step >= 5 || step == 1 {
		ts = append(ts, plot.Tick{Value: 1, Label: "1"})
	}
	for w := step; w <= n; w += step {
		if w > 1 {
			ts = append(ts, plot.Tick{Value: float64(w), Label: fmt.Sprint(w)})
		}
	}
	return ts
}

// poolTicks labels the prefill pool's ranks P1 to Pp from the bottom, and
// the decode pool's D1 to Dd above them, about eight labels in all.
func poolTicks(prefill, decode int) []plot.Tick {
	ts := workerTicks(prefill, 4)
	for i := range ts {
		ts[i].Label = "P" + ts[i].Label
	}
	for _, t := range workerTicks(decode, 4) {
		t.Value += float64(prefill)
		t.Label = "D" + t.Label
		ts = append(ts, t)
	}
	return ts
}

// niceStep is the number of the form 1, 2 or 5 × 10^k nearest to x (by
// ratio).
func niceStep(x float64) float64 {
	base := math.Pow(10, math.Floor(math.Log10(x)))
	best := base
	for _, m := range []float64{2, 5, 10} {
		if math.Abs(math.Log(m*base/x)) < math.Abs(math.Log(best/x)) {
			best = m * base
		}
	}
	return best
}

// timeUnit is how the time axes count: ms, s or min, by the run's length.
type timeUnit struct {
	name string
	ms   float64
}

func timeUnitFor(span float64) timeUnit {
	switch {
	case span < 2000:
		return timeUnit{"ms", 1}
	case span < 3*60000:
		return timeUnit{"s", 1000}
	}
	return timeUnit{"min", 60000}
}

func formatWindow(ms float64) string {
	if ms < 1000 {
		return fmt.Sprintf("%g ms", ms)
	}
	return fmt.Sprintf("%g s", ms/1000)
}
