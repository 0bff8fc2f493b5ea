// Command loadcurve draws TTFT p50 and p99 against offered load for kv and
// round robin routing: the shared Mooncake trace replayed at rising
// --arrival-speedup-ratio on the default cluster and engine. It makes
// docs/img/ttft_vs_load.png (docs/replay.md):
//
//	go run ./scripts/loadcurve -trace ../shared/traces/synthetic_trace.jsonl -out docs/img/ttft_vs_load.png
package main

import (
	"flag"
	"fmt"
	"image/color"
	"log"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

func main() {
	tracePath := flag.String("trace", "../shared/traces/synthetic_trace.jsonl", "Mooncake trace")
	out := flag.String("out", "docs/img/ttft_vs_load.png", "figure (.png or .svg)")
	workers := flag.Int("workers", 8, "simulated workers")
	flag.Parse()
	f, err := os.Open(*tracePath)
	if err != nil {
		log.Fatal(err)
	}
	trace, err := replay.ReadMooncake(f, 512)
	f.Close()
	if err != nil {
		log.Fatal(err)
	}
	replay.SpeedUp(trace, 1)
	span := 0.0
	for _, r := range trace {
		span = math.Max(span, r.Arrival)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("TTFT against offered load: shared Mooncake trace, %d workers, iteration engine", *workers)
	p.X.Label.Text = "offered load (requests/s)"
	p.Y.Label.Text = "TTFT (ms, log scale)"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	colors := map[protocol.Policy]color.Color{
		protocol.PolicyKV:         color.RGBA{R: 0x4e, G: 0x79, B: 0xa7, A: 0xff},
		protocol.PolicyRoundRobin: color.RGBA{R: 0xf2, G: 0x8e, B: 0x2b, A: 0xff},
	}
	for _, policy := range []protocol.Policy{protocol.PolicyKV, protocol.PolicyRoundRobin} {
		var p50, p99 plotter.XYs
		for _, ratio := range []float64{1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16} {
			shaped := append([]replay.Request(nil), trace...)
			replay.SpeedUp(shaped, ratio)
			cfg := protocol.DefaultConfig()
			cfg.BlockSize, cfg.Policy = 512, policy
			res, err := replay.Run(shaped, replay.Options{Cluster: replay.DefaultCluster(*workers), Router: cfg})
			if err != nil {
				log.Fatal(err)
			}
			load := float64(len(trace)) / (span / ratio / 1000)
			m := res.Metrics
			p50 = append(p50, plotter.XY{X: load, Y: m.MedianTTFTMS})
			p99 = append(p99, plotter.XY{X: load, Y: m.P99TTFTMS})
			fmt.Printf("%-12s ratio %4.1f  load %6.1f req/s  throughput %5.1f req/s  TTFT p50 %8.1f ms  p99 %8.1f ms\n",
				policy, ratio, load, m.RequestThroughput, m.MedianTTFTMS, m.P99TTFTMS)
		}
		for _, l := range []struct {
			name string
			pts  plotter.XYs
			dash []vg.Length
		}{{"p50", p50, nil}, {"p99", p99, []vg.Length{vg.Points(6), vg.Points(3)}}} {
			line, points, err := plotter.NewLinePoints(l.pts)
			if err != nil {
				log.Fatal(err)
			}
			line.Color, line.Dashes, line.Width = colors[policy], l.dash, vg.Points(2)
			points.Color, points.Shape = colors[policy], draw.CircleGlyph{}
			p.Add(line, points)
			p.Legend.Add(fmt.Sprintf("%s %s", policy, l.name), line, points)
		}
	}
	p.Add(plotter.NewGrid())
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, *out); err != nil {
		log.Fatal(err)
	}
}
