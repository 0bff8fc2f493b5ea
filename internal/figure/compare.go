package figure

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/offline-router/offline-router/internal/replay"
)

// The comparison row: one panel per verdict metric, one line per
// contender, its ratio to the baseline and the ratio's interval.
const (
	cmpHeadH = 1.7 * vg.Inch  // the row's title, its key, a panel's title and axis
	cmpLineH = 0.55 * vg.Inch // one contender
	cmpMinH  = 3 * vg.Inch
)

// verdictLabels name the report's verdict metrics in a panel's title, in
// the report's order; a metric not listed here takes its JSON key.
var verdictLabels = map[string]string{
	"mean_ttft_ms":    "mean TTFT",
	"p99_ttft_ms":     "p99 TTFT",
	"request_goodput": "goodput",
	"prefix_hit_rate": "prefix hit rate",
}

// A verdict's mark: a green disc for better, a red square for worse, a
// hollow grey ring for a tie (the interval holds 1), so that the three
// read apart in grey print too.
var verdictMarks = map[string]draw.GlyphStyle{
	"better": {Color: color.RGBA{0x1b, 0x8a, 0x3c, 255}, Radius: 5, Shape: draw.CircleGlyph{}},
	"worse":  {Color: color.RGBA{0xc0, 0x1f, 0x1f, 255}, Radius: 5, Shape: draw.BoxGlyph{}},
	"tie":    {Color: color.Gray{0x70}, Radius: 5, Shape: draw.RingGlyph{}},
}

// comparison is what the comparison row draws: the baseline, and the
// contenders measured against it with their series (name and colour).
type comparison struct {
	baseline string
	metrics  []string // verdict metrics, as the contenders' versus entries list them
	rows     []series
	versus   []map[string]replay.Versus // by row, by metric
}

// comparisonOf gathers from the report the contenders that have versus
// entries; nil when none has (one contender, or no baseline).
func comparisonOf(rep *replay.Report, ss []series) *comparison {
	if rep == nil || len(rep.Deterministic.Contenders) != len(ss) {
		return nil
	}
	cmp := &comparison{baseline: rep.Deterministic.Baseline}
	seen := map[string]bool{}
	for i, c := range rep.Deterministic.Contenders {
		if len(c.Versus) == 0 {
			continue
		}
		by := map[string]replay.Versus{}
		for _, v := range c.Versus {
			by[v.Metric] = v
			if !seen[v.Metric] {
				seen[v.Metric] = true
				cmp.metrics = append(cmp.metrics, v.Metric)
			}
		}
		cmp.rows, cmp.versus = append(cmp.rows, ss[i]), append(cmp.versus, by)
	}
	if len(cmp.rows) == 0 {
		return nil
	}
	return cmp
}

// height is the row's height: its head and a line per contender.
func (c *comparison) height() vg.Length {
	return max(cmpHeadH+vg.Length(len(c.rows))*cmpLineH, cmpMinH)
}

// plots draws one panel per metric: per contender, first on top, a mark at
// its ratio to the baseline, coloured and shaped by its verdict, the
// interval as an error bar and written above it as a change in percent; a
// dashed line at 1, where a contender does as well as the baseline. Only
// the first panel names the contenders (the lines are the same across the
// row), so that long names take room once.
func (c *comparison) plots() ([]*plot.Plot, error) {
	n := len(c.rows)
	names := make([]string, n)
	for i, s := range c.rows {
		names[n-1-i] = s.name
	}
	var out []*plot.Plot
	for k, metric := range c.metrics {
		p := plot.New()
		label := verdictLabels[metric]
		if label == "" {
			label = metric
		}
		lo, hi := 1.0, 1.0 // the axis always shows the reference
		marks := map[string]plotter.XYs{}
		var bars intervals
		var at plotter.XYLabels
		better := ""
		for i, by := range c.versus {
			v, ok := by[metric]
			if !ok || math.IsNaN(v.Ratio) || math.IsInf(v.Ratio, 0) {
				continue
			}
			better = v.Better
			y := float64(n - 1 - i)
			marks[v.Verdict] = append(marks[v.Verdict], plotter.XY{X: v.Ratio, Y: y})
			ci := v.CI95
			if !(ci[0] <= v.Ratio && v.Ratio <= ci[1]) { // no interval (or a malformed one): the mark alone
				ci = [2]float64{v.Ratio, v.Ratio}
			}
			bars = append(bars, interval{y: y, ratio: v.Ratio, lo: ci[0], hi: ci[1]})
			lo, hi = math.Min(lo, ci[0]), math.Max(hi, ci[1])
			at.XYs = append(at.XYs, plotter.XY{X: v.Ratio, Y: y})
			at.Labels = append(at.Labels, fmt.Sprintf("%+.1f%% [%+.1f, %+.1f]", 100*(v.Ratio-1), 100*(ci[0]-1), 100*(ci[1]-1)))
		}
		p.Title.Text = label
		switch better {
		case "lower":
			p.Title.Text += " (lower is better)"
		case "higher":
			p.Title.Text += " (higher is better)"
		}
		p.X.Label.Text = "ratio to " + c.baseline
		ref, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.6}, {X: 1, Y: float64(n) - 0.4}})
		if err != nil {
			return nil, err
		}
		// Light, so that the labels above the bars it passes under read.
		ref.Color, ref.Dashes, ref.Width = color.Gray{0xa0}, []vg.Length{4, 3}, 0.75
		p.Add(plotter.NewGrid(), ref)
		if len(bars) > 0 {
			eb, err := plotter.NewXErrorBars(bars)
			if err != nil {
				return nil, err
			}
			eb.LineStyle.Width, eb.CapWidth = 1.5, 8
			p.Add(eb)
		}
		for _, verdict := range []string{"better", "worse", "tie"} {
			if len(marks[verdict]) == 0 {
				continue
			}
			sc, err := plotter.NewScatter(marks[verdict])
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle = verdictMarks[verdict]
			p.Add(sc)
		}
		if len(at.XYs) > 0 {
			labels, err := plotter.NewLabels(at)
			if err != nil {
				return nil, err
			}
			for i := range labels.TextStyle {
				labels.TextStyle[i] = textStyle(9)
				labels.TextStyle[i].XAlign, labels.TextStyle[i].YAlign = draw.XCenter, draw.YBottom
			}
			labels.Offset = vg.Point{Y: 6}
			p.Add(labels)
		}
		// Room on both sides for the percentages written over the marks.
		span := math.Max(hi-lo, 0.02)
		p.X.Min, p.X.Max = math.Max(0, lo-0.35*span), hi+0.35*span // a ratio is not below 0
		p.X.Tick.Marker = niceTicks{}
		if k == 0 {
			p.NominalY(names...)
		} else {
			p.NominalY(make([]string, n)...)
		}
		p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
		p.Y.Tick.Label.Font.Size = legendSize
		out = append(out, p)
	}
	return out, nil
}

// interval is one contender's error bar, for plotter.XErrorBars.
type interval struct {
	y, ratio, lo, hi float64
}

type intervals []interval

func (iv intervals) Len() int                    { return len(iv) }
func (iv intervals) XY(i int) (float64, float64) { return iv[i].ratio, iv[i].y }
func (iv intervals) XError(i int) (float64, float64) {
	return iv[i].ratio - iv[i].lo, iv[i].hi - iv[i].ratio
}

// drawVerdictKey writes, centred on c at height y, what the marks mean.
func drawVerdictKey(c draw.Canvas, sty text.Style, y vg.Length, baseline string) {
	entries := []struct{ verdict, text string }{
		{"better", "better than " + baseline},
		{"worse", "worse"},
		{"tie", "tie (the interval holds 1)"},
	}
	const markW = 14 // a mark and the space after it
	total := vg.Length(entryGap * (len(entries) - 1))
	for _, e := range entries {
		total += markW + sty.Width(e.text)
	}
	x := (c.Min.X + c.Max.X - total) / 2
	sty.YAlign = draw.YCenter
	for _, e := range entries {
		c.DrawGlyph(verdictMarks[e.verdict], vg.Point{X: x + 5, Y: y})
		c.FillText(sty, vg.Point{X: x + markW, Y: y}, e.text)
		x += markW + sty.Width(e.text) + entryGap
	}
}
