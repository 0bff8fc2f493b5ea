package main

import (
	"cmp"
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/offline-router/offline-router/internal/sweep"
)

const (
	sweepFigW = 12 * vg.Inch
	sweepFigH = 8.5 * vg.Inch // and a line below for each point of the front
	maxKey    = 16            // front points listed under the panel at most
)

// saveSweepPlot draws a sweep's points: prefix hit rate (x, higher is
// better) against TTFT p99 (y, lower is better), one colour per policy as
// the legend above says, hollow when outside the objective's bounds; the
// Pareto front ringed, joined and labelled with its settings; the
// recommended point crossed and named in the subtitle.
func saveSweepPlot(path string, t *sweep.Table) error {
	r := &t.Deterministic
	var policies []string
	for _, pt := range r.Points {
		if !slices.Contains(policies, pt.Policy) {
			policies = append(policies, pt.Policy)
		}
	}
	p := plot.New()
	p.X.Label.Text = "prefix hit rate (cached input tokens / input tokens; higher is better)"
	p.Y.Label.Text = "TTFT p99 (ms; lower is better)"
	p.Add(plotter.NewGrid())
	xy := func(pt *sweep.PointResult) plotter.XY {
		m := &pt.Report.Policies[0]
		return plotter.XY{X: m.PrefixHitRate, Y: m.P99TTFTMS}
	}
	outside := 0
	for i, name := range policies {
		var within, without plotter.XYs
		for j := range r.Points {
			switch pt := &r.Points[j]; {
			case pt.Policy != name:
			case pt.MeetsBounds:
				within = append(within, xy(pt))
			default:
				without = append(without, xy(pt))
			}
		}
		outside += len(without)
		for _, set := range []struct {
			pts   plotter.XYs
			shape draw.GlyphDrawer
		}{{within, draw.CircleGlyph{}}, {without, draw.RingGlyph{}}} {
			if len(set.pts) == 0 {
				continue
			}
			s, err := plotter.NewScatter(set.pts)
			if err != nil {
				return err
			}
			// Later policies draw smaller, so that two that came out alike
			// show as a dot in a disc rather than one hiding the other.
			radius := 3 + 0.7*vg.Length(len(policies)-1-i)
			s.GlyphStyle = draw.GlyphStyle{Color: seriesColor(i), Radius: radius, Shape: set.shape}
			p.Add(s)
		}
	}
	var front []*sweep.PointResult
	for j := range r.Points {
		if r.Points[j].OnFront {
			front = append(front, &r.Points[j])
		}
	}
	slices.SortFunc(front, func(a, b *sweep.PointResult) int {
		return cmp.Or(cmp.Compare(xy(a).X, xy(b).X), cmp.Compare(xy(a).Y, xy(b).Y))
	})
	// The front's points are numbered beside their rings, and their
	// settings listed under the panel: settings written beside the points
	// print over each other where the front is dense. Points that came out
	// alike (a knob that did not matter here) share a number.
	var frontXY plotter.XYs
	var frontLabels, key []string
	for i := 0; i < len(front); {
		j := i + 1
		for j < len(front) && xy(front[j]) == xy(front[i]) {
			j++
		}
		n := len(frontXY) + 1
		entry := fmt.Sprintf("%d: %s", n, shortSettings(front[i]))
		if j-i > 1 {
			entry += fmt.Sprintf(" (and %d alike)", j-i-1)
		}
		m := &front[i].Report.Policies[0]
		entry += fmt.Sprintf(": hit rate %.3f, TTFT p99 %s ms", m.PrefixHitRate, formatMS(m.P99TTFTMS))
		frontXY = append(frontXY, xy(front[i]))
		frontLabels = append(frontLabels, fmt.Sprintf(" %d", n))
		key = append(key, entry)
		i = j
	}
	if len(key) > maxKey {
		key = append(key[:maxKey-1], fmt.Sprintf("... and %d more on the front (the table lists them)", len(key)-maxKey+1))
	}
	if len(frontXY) > 0 {
		line, err := plotter.NewLine(frontXY)
		if err != nil {
			return err
		}
		line.Color, line.Dashes, line.Width = color.Gray{90}, []vg.Length{4, 3}, 1
		rings, err := plotter.NewScatter(frontXY)
		if err != nil {
			return err
		}
		rings.GlyphStyle = draw.GlyphStyle{Color: color.Black, Radius: 7, Shape: draw.RingGlyph{}}
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: frontXY, Labels: frontLabels})
		if err != nil {
			return err
		}
		// Neighbours on the front alternate above and below their points,
		// so that close ones do not print over each other.
		for i := range labels.TextStyle {
			labels.TextStyle[i] = textStyle(11)
			labels.TextStyle[i].YAlign = draw.YBottom
			if i%2 == 1 {
				labels.TextStyle[i].YAlign = draw.YTop
			}
		}
		p.Add(line, rings, labels)
	}
	subtitle := []string{fmt.Sprintf("%d points, %d of them hollow: outside the objective's bounds. Ringed and joined: the Pareto front (%d points).",
		len(r.Points), outside, len(r.Pareto))}
	if r.Recommended != nil {
		i := slices.IndexFunc(r.Points, func(pt sweep.PointResult) bool { return pt.ID == *r.Recommended })
		rec := &r.Points[i]
		mark, err := plotter.NewScatter(plotter.XYs{xy(rec)})
		if err != nil {
			return err
		}
		mark.GlyphStyle = draw.GlyphStyle{Color: color.RGBA{0xc0, 0, 0, 255}, Radius: 11, Shape: draw.CrossGlyph{}}
		p.Add(mark)
		subtitle = append(subtitle, fmt.Sprintf("Red cross: recommended for %s: %s", r.Objective.String(), shortSettings(rec)))
	} else {
		subtitle = append(subtitle, "No point meets "+r.Objective.String())
	}
	// Room around the points, for the glyphs and the front's numbers.
	dx, dy := (p.X.Max-p.X.Min)*0.04, (p.Y.Max-p.Y.Min)*0.04
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = p.X.Min-dx, p.X.Max+dx, p.Y.Min-dy, p.Y.Max+dy

	title := r.Description
	if title == "" {
		title = "sweep"
	}
	keyStyle := textStyle(11)
	keyLineH := keyStyle.Height("Xg") * 1.35
	height := sweepFigH + vg.Length(len(key))*keyLineH + 0.3*vg.Inch
	canvas := newCanvas(path, sweepFigW, height)
	dc := draw.New(canvas)
	body := draw.Crop(dc, margin, -margin, margin, -margin)
	top := body.Max.Y
	titleStyle, subStyle, legendStyle := textStyle(titleSize), textStyle(11), textStyle(legendSize)
	titleStyle.XAlign, titleStyle.YAlign = draw.XCenter, draw.YTop
	subStyle.XAlign, subStyle.YAlign = draw.XCenter, draw.YTop
	body.FillText(titleStyle, vg.Point{X: (body.Min.X + body.Max.X) / 2, Y: top}, title)
	top -= titleStyle.Height(title) * 1.4
	for _, line := range subtitle {
		body.FillText(subStyle, vg.Point{X: (body.Min.X + body.Max.X) / 2, Y: top}, line)
		top -= subStyle.Height(line) * 1.4
	}
	top -= subStyle.Height("X") * 0.3
	lineH := legendStyle.Height("Xg") * 1.5
	for _, line := range legendLines(policies, legendStyle, body.Max.X-body.Min.X) {
		drawLegendLine(body, legendStyle, line, top-lineH/2)
		top -= lineH
	}
	top -= legendGap
	keyH := vg.Length(len(key))*keyLineH + 0.3*vg.Inch
	p.Draw(band(body, top, top-body.Min.Y-keyH))
	y := body.Min.Y + keyH - 0.3*vg.Inch
	keyStyle.YAlign = draw.YTop
	for _, line := range key {
		body.FillText(keyStyle, vg.Point{X: body.Min.X + 0.6*vg.Inch, Y: y}, line)
		y -= keyLineH
	}
	return saveCanvas(path, canvas, strings.ToLower(filepath.Ext(path)))
}

// shortSettings names a point by its grid flags, without their dashes (and
// a policy by its name alone).
func shortSettings(pt *sweep.PointResult) string {
	parts := make([]string, len(pt.Varied))
	for i, f := range pt.Varied {
		parts[i] = strings.TrimPrefix(strings.TrimPrefix(f, "--"), "policy=") // the colour says the policy too
	}
	if len(parts) == 0 {
		return pt.ID
	}
	return strings.Join(parts, " ")
}
