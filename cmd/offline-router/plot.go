package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/offline-router/offline-router/internal/replay"
)

// loadPlot collects samples of a replay for --plot: per-worker load over
// simulated time, and the running prefix hit rate.
type loadPlot struct {
	samples []replay.Sample
}

func (p *loadPlot) sample(s replay.Sample) { p.samples = append(p.samples, s) }

// save draws two aligned panels, load on top and hit rate below, as PNG or
// SVG by the file's extension.
func (p *loadPlot) save(path string, rep *replay.Report) error {
	if err := plotFormat(path); err != nil {
		return err
	}
	ext := strings.ToLower(filepath.Ext(path))
	load := plot.New()
	load.Title.Text = fmt.Sprintf("Requests on each worker (policy %s)", rep.Policy)
	load.X.Label.Text = "simulated time (s)"
	load.Y.Label.Text = "running + waiting"
	workers := 0
	if len(p.samples) > 0 {
		workers = len(p.samples[0].Active)
	}
	for w := range workers {
		pts := make(plotter.XYs, len(p.samples))
		for i, s := range p.samples {
			pts[i] = plotter.XY{X: s.T / 1000, Y: float64(s.Active[w])}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(w)
		load.Add(line)
		load.Legend.Add(fmt.Sprintf("worker %d", w+1), line)
	}
	load.Legend.Top = true
	hit := plot.New()
	hit.Title.Text = fmt.Sprintf("Running prefix hit rate (final %.3f)", rep.PrefixHitRate)
	hit.X.Label.Text = "simulated time (s)"
	hit.Y.Min, hit.Y.Max = 0, 1
	pts := make(plotter.XYs, len(p.samples))
	for i, s := range p.samples {
		pts[i] = plotter.XY{X: s.T / 1000, Y: s.HitRate}
	}
	line, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	line.Color = color.RGBA{B: 200, A: 255}
	hit.Add(line)

	width, height := 10*vg.Inch, 8*vg.Inch
	var canvas vg.CanvasSizer
	if ext == ".svg" {
		canvas = vgsvg.New(width, height)
	} else {
		canvas = vgimg.New(width, height)
	}
	plots := [][]*plot.Plot{{load}, {hit}}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Centimeter, PadTop: vg.Millimeter * 5, PadBottom: vg.Millimeter * 5,
		PadLeft: vg.Millimeter * 5, PadRight: vg.Millimeter * 5}
	dc := draw.New(canvas)
	canvases := plot.Align(plots, tiles, dc)
	load.Draw(canvases[0][0])
	hit.Draw(canvases[1][0])
	return saveCanvas(path, canvas, ext)
}

// plotFormat checks that path names a format the plot can be drawn in.
func plotFormat(path string) error {
	if ext := strings.ToLower(filepath.Ext(path)); ext != ".png" && ext != ".svg" {
		return fmt.Errorf("--plot %s: the file must end in .png or .svg", path)
	}
	return nil
}
