package figure

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
	"github.com/offline-router/offline-router/internal/sweep"
)

const (
	sweepFigW  = 13 * vg.Inch
	sweepRowH  = 6 * vg.Inch // one row of two panels per workload
	sweepHeadH = 1.5 * vg.Inch
	maxKey     = 16 // front points listed under a row at most
)

var recommendedColor = color.RGBA{0xc0, 0, 0, 255}

// SaveSweep draws a sweep: per workload, a row of two panels of the
// front's metrics (the table's Front: the objective's across, the one it
// bounds first up, each point at its mean over the repeats), all
// the points on the left and, on the right, the region of the Pareto front
// and the recommended point, where they crowd. One colour per policy as the
// legend says, a hollow circle for a point outside the objective's bounds,
// a black square around each point of the front (joined and numbered, the
// settings listed under the row), a red cross on the recommended point.
func SaveSweep(path string, t *sweep.Table) error {
	r := &t.Deterministic
	var policies []string
	for _, pt := range r.Points {
		if !slices.Contains(policies, pt.Policy) {
			policies = append(policies, pt.Policy)
		}
	}
	slices.SortStableFunc(policies, func(a, b string) int {
		ia, ib := slices.Index(protocol.Policies, protocol.Policy(a)), slices.Index(protocol.Policies, protocol.Policy(b))
		return cmp.Compare(uint(ia), uint(ib)) // the router's policies first, in their order
	})
	keyStyle := textStyle(11)
	keyLineH := keyStyle.Height("Xg") * 1.35
	type row struct {
		all, zoom *plot.Plot
		title     string
		key       []string
	}
	var rows []row
	height := sweepHeadH
	groups := r.ScenarioPoints()
	for wi, w := range r.Workloads {
		pts := groups[wi]
		all, zoom, key, err := sweepPanels(pts, w, r.Front, policies)
		if err != nil {
			return err
		}
		title := "Workload " + w.Workload + ": "
		if len(w.Scenario) > 0 {
			title = "Workload " + w.Workload + " with " + strings.Join(w.Scenario, " ") + ": "
		}
		switch {
		case w.Recommended != nil:
			i := slices.IndexFunc(pts, func(p *sweep.PointResult) bool { return p.ID == *w.Recommended })
			title += "recommended (red cross): " + shortSettings(pts[i])
		case w.Test == "tie":
			title += fmt.Sprintf("no recommendation: %d points tie on %s", len(w.Tied), r.Front.X)
		default:
			title += "no point meets the objective"
		}
		rows = append(rows, row{all, zoom, title, key})
		height += sweepRowH + vg.Length(len(key))*keyLineH + 0.3*vg.Inch
	}

	canvas := newCanvas(path, sweepFigW, height)
	dc := draw.New(canvas)
	body := draw.Crop(dc, margin, -margin, margin, -margin)
	top := body.Max.Y
	center := (body.Min.X + body.Max.X) / 2
	title := r.Description
	if title == "" {
		title = "sweep"
	}
	titleStyle, subStyle, legendStyle := textStyle(titleSize), textStyle(11), textStyle(legendSize)
	titleStyle.XAlign, titleStyle.YAlign = draw.XCenter, draw.YTop
	subStyle.XAlign, subStyle.YAlign = draw.XCenter, draw.YTop
	body.FillText(titleStyle, vg.Point{X: center, Y: top}, title)
	top -= titleStyle.Height(title) * 1.4
	for _, line := range []string{
		fmt.Sprintf("%d points. Objective: %s.", len(r.Points), r.Objective.String()),
		"Hollow: outside the objective's bounds. Black squares, joined and numbered: the Pareto front. Red cross: the recommended point; red rings: points tied for best.",
	} {
		body.FillText(subStyle, vg.Point{X: center, Y: top}, line)
		top -= subStyle.Height(line) * 1.4
	}
	lineH := legendStyle.Height("Xg") * 1.5
	key := make([]series, len(policies))
	for i, name := range policies {
		key[i] = series{name: name, color: policyColor(name)}
	}
	for _, line := range legendLines(key, legendStyle, body.Max.X-body.Min.X) {
		drawLegendLine(body, legendStyle, line, top-lineH/2)
		top -= lineH
	}
	top -= legendGap
	rowTitle := textStyle(13)
	rowTitle.XAlign, rowTitle.YAlign = draw.XCenter, draw.YTop
	keyStyle.YAlign = draw.YTop
	for _, rw := range rows {
		body.FillText(rowTitle, vg.Point{X: center, Y: top}, rw.title)
		top -= rowTitle.Height(rw.title) * 1.5
		panels := band(body, top, sweepRowH-rowTitle.Height(rw.title)*1.5)
		tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: 0.6 * vg.Inch}
		grid := [][]*plot.Plot{{rw.all, rw.zoom}}
		for j, c := range plot.Align(grid, tiles, panels)[0] {
			grid[0][j].Draw(c)
		}
		top -= sweepRowH - rowTitle.Height(rw.title)*1.5
		for _, line := range rw.key {
			body.FillText(keyStyle, vg.Point{X: body.Min.X + 0.6*vg.Inch, Y: top}, line)
			top -= keyLineH
		}
		top -= 0.3 * vg.Inch
	}
	return saveCanvas(path, canvas)
}

// sweepPanels draws one workload's points twice, whole and near the front,
// and lists the front's points for the key under them.
func sweepPanels(pts []*sweep.PointResult, w sweep.WorkloadResult, f sweep.Front, policies []string) (all, zoom *plot.Plot, key []string, err error) {
	xy := func(pt *sweep.PointResult) plotter.XY {
		x, _ := pt.Mean(f.X)
		y, _ := pt.Mean(f.Y)
		return plotter.XY{X: x, Y: y}
	}
	byID := make(map[string]*sweep.PointResult, len(pts))
	for _, p := range pts {
		byID[p.ID] = p
	}
	var front []*sweep.PointResult
	for _, id := range w.Pareto { // best on the objective first
		front = append(front, byID[id])
	}
	// The front's points are numbered beside their squares, and their
	// settings listed under the panels: settings written beside the points
	// print over each other where the front is dense. Points that came out
	// alike (a knob that did not matter here) share a number.
	var frontXY plotter.XYs
	var numbers []string
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
		at := xy(front[i])
		entry += fmt.Sprintf(": %s %.4g, %s %.4g", f.X, at.X, f.Y, at.Y)
		frontXY = append(frontXY, xy(front[i]))
		numbers = append(numbers, fmt.Sprintf(" %d", n))
		key = append(key, entry)
		i = j
	}
	if len(key) > maxKey {
		key = append(key[:maxKey-1], fmt.Sprintf("... and %d more on the front (the table lists them)", len(key)-maxKey+1))
	}
	var rec *sweep.PointResult
	if w.Recommended != nil {
		rec = byID[*w.Recommended]
	}
	var tied plotter.XYs // the best and those that tie with it, when none is recommended
	for _, id := range w.Tied {
		tied = append(tied, xy(byID[id]))
	}
	draw1 := func(title string) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = axisLabel(f.X, f.XLower)
		p.Y.Label.Text = axisLabel(f.Y, f.YLower)
		p.Add(plotter.NewGrid())
		for i, name := range policies {
			var within, without plotter.XYs
			for _, pt := range pts {
				switch {
				case pt.Policy != name:
				case pt.MeetsBounds:
					within = append(within, xy(pt))
				default:
					without = append(without, xy(pt))
				}
			}
			for _, set := range []struct {
				pts   plotter.XYs
				shape draw.GlyphDrawer
			}{{within, draw.CircleGlyph{}}, {without, draw.RingGlyph{}}} {
				if len(set.pts) == 0 {
					continue
				}
				s, err := plotter.NewScatter(set.pts)
				if err != nil {
					return nil, err
				}
				// Later policies draw smaller, so that two that came out
				// alike show as a dot in a disc rather than one hiding the
				// other.
				s.GlyphStyle = draw.GlyphStyle{Color: policyColor(name), Radius: 4 + 0.6*vg.Length(len(policies)-1-i), Shape: set.shape}
				p.Add(s)
			}
		}
		if len(frontXY) > 0 {
			line, err := plotter.NewLine(frontXY)
			if err != nil {
				return nil, err
			}
			line.Color, line.Dashes, line.Width = color.Gray{90}, []vg.Length{4, 3}, 1
			squares, err := plotter.NewScatter(frontXY)
			if err != nil {
				return nil, err
			}
			squares.GlyphStyle = draw.GlyphStyle{Color: color.Black, Radius: 8, Shape: draw.SquareGlyph{}}
			labels, err := plotter.NewLabels(plotter.XYLabels{XYs: frontXY, Labels: numbers})
			if err != nil {
				return nil, err
			}
			// Neighbours on the front alternate above and below their
			// points, so that close ones do not print over each other.
			for i := range labels.TextStyle {
				labels.TextStyle[i] = textStyle(11)
				labels.TextStyle[i].YAlign = draw.YBottom
				if i%2 == 1 {
					labels.TextStyle[i].YAlign = draw.YTop
				}
				labels.Offset = vg.Point{X: 6}
			}
			p.Add(line, squares, labels)
		}
		if err := addHeadroom(p, w.Headroom, f, pts, xy); err != nil {
			return nil, err
		}
		if len(tied) > 0 {
			rings, err := plotter.NewScatter(tied)
			if err != nil {
				return nil, err
			}
			rings.GlyphStyle = draw.GlyphStyle{Color: recommendedColor, Radius: 11, Shape: draw.RingGlyph{}}
			p.Add(rings)
		}
		if rec != nil {
			mark, err := plotter.NewScatter(plotter.XYs{xy(rec)})
			if err != nil {
				return nil, err
			}
			mark.GlyphStyle = draw.GlyphStyle{Color: recommendedColor, Radius: 11, Shape: draw.CrossGlyph{}}
			p.Add(mark)
		}
		return p, nil
	}
	if all, err = draw1("All points"); err != nil {
		return nil, nil, nil, err
	}
	pad(all, 0.04)
	zoomTitle := "Near the front"
	if len(tied) > 0 {
		zoomTitle = "The tied points"
	}
	if zoom, err = draw1(zoomTitle); err != nil {
		return nil, nil, nil, err
	}
	// The zoom frames the front and the recommended point, and shows
	// whatever else falls there.
	// With a tie, where the tied points crowd; else the front's region.
	box := slices.Clone(tied)
	if len(box) == 0 {
		box = slices.Clone(frontXY)
	}
	if rec != nil {
		box = append(box, xy(rec))
	}
	if len(box) > 0 {
		zoom.X.Min, zoom.X.Max, zoom.Y.Min, zoom.Y.Max = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
		for _, b := range box {
			zoom.X.Min, zoom.X.Max = min(zoom.X.Min, b.X), max(zoom.X.Max, b.X)
			zoom.Y.Min, zoom.Y.Max = min(zoom.Y.Min, b.Y), max(zoom.Y.Max, b.Y)
		}
		// At least 1% of each value, so that a front of one point still has
		// a scale.
		widen(&zoom.X.Min, &zoom.X.Max, math.Max(math.Abs(zoom.X.Max)*0.01, 1e-3))
		widen(&zoom.Y.Min, &zoom.Y.Max, math.Max(math.Abs(zoom.Y.Max)*0.01, 1e-3))
		pad(zoom, 0.15)
	}
	return all, zoom, key, nil
}

// addHeadroom draws, where an axis is the prefix hit rate, the
// infinite-cache bound (no router can pass it) and one cluster-sized LRU
// cache's rate (a reference) across the panel.
func addHeadroom(p *plot.Plot, h *replay.Headroom, f sweep.Front, pts []*sweep.PointResult, xy func(*sweep.PointResult) plotter.XY) error {
	if h == nil || f.X != "prefix_hit_rate" && f.Y != "prefix_hit_rate" || len(pts) == 0 {
		return nil
	}
	lo, hi := math.Inf(1), math.Inf(-1) // the other axis's span, for the lines' length
	for _, pt := range pts {
		at := xy(pt)
		v := at.Y
		if f.Y == "prefix_hit_rate" {
			v = at.X
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	type reference struct {
		at    float64
		label string
		dash  []vg.Length
		top   bool // labelled at the line's far end, else its near end
	}
	refs := []reference{{h.InfiniteCacheHitRate, "infinite cache (bound)", []vg.Length{2, 2}, true},
		{h.ClusterLRUHitRate, "one cluster-sized LRU", []vg.Length{6, 3}, false}}
	if math.Abs(h.InfiniteCacheHitRate-h.ClusterLRUHitRate) < 5e-4 { // the workload fits the cluster: one line
		refs = []reference{{h.InfiniteCacheHitRate, "infinite cache = one cluster-sized LRU", []vg.Length{2, 2}, true}}
	}
	for _, ref := range refs {
		ends := plotter.XYs{{X: ref.at, Y: lo}, {X: ref.at, Y: hi}}
		if f.Y == "prefix_hit_rate" {
			ends = plotter.XYs{{X: lo, Y: ref.at}, {X: hi, Y: ref.at}}
		}
		at := ends[:1]
		if ref.top {
			at = ends[1:]
		}
		line, err := plotter.NewLine(ends)
		if err != nil {
			return err
		}
		line.Color, line.Dashes, line.Width = color.RGBA{0x40, 0x40, 0x90, 255}, ref.dash, 1
		label, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: []string{" " + ref.label}})
		if err != nil {
			return err
		}
		label.TextStyle[0] = textStyle(9)
		p.Add(line, label)
	}
	return nil
}

// axisLabel names a metric and its good direction.
func axisLabel(metric string, lower bool) string {
	if lower {
		return metric + " (lower is better)"
	}
	return metric + " (higher is better)"
}

// pad leaves room around the data, for the glyphs and the front's numbers.
func pad(p *plot.Plot, f float64) {
	dx, dy := (p.X.Max-p.X.Min)*f, (p.Y.Max-p.Y.Min)*f
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = p.X.Min-dx, p.X.Max+dx, p.Y.Min-dy, p.Y.Max+dy
}

// widen makes [lo, hi] at least span wide, about its middle.
func widen(lo, hi *float64, span float64) {
	if *hi-*lo < span {
		mid := (*lo + *hi) / 2
		*lo, *hi = mid-span/2, mid+span/2
	}
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
