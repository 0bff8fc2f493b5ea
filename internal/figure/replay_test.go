package figure

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

var allPolicies = []protocol.Policy{protocol.PolicyKV, protocol.PolicyRoundRobin, protocol.PolicyRandom, protocol.PolicyLeastLoaded}

const maxPlotBytes = 1 << 20

// plotResults replays the built-in workload under each policy, with its
// sessions' arrivals spread stretch times further apart: a Result's fields
// are unexported, so a real replay is the way to get one.
func plotResults(t testing.TB, sessions, workers int, stretch float64, policies ...protocol.Policy) []*replay.Result {
	t.Helper()
	var out []*replay.Result
	for _, p := range policies {
		cfg := protocol.DefaultConfig()
		cfg.BlockSize = 512
		cfg.Policy = p
		trace := replay.Builtin(1, sessions, 0, 512)
		for i := range trace {
			trace[i].Arrival *= stretch // later turns keep their think time
		}
		res, err := replay.Run(trace, replay.Options{Cluster: cluster.Default(workers), Router: cfg})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
	}
	return out
}

// checkPlot saves the figure to dir/name and checks what any viewer needs:
// a decodable PNG, or an SVG that names every policy and embeds its
// heatmaps so that viewers draw them; either under 1 MB.
func checkPlot(t *testing.T, dir, name string, results []*replay.Result) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := SaveReplay(path, "replay test", nil, results); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d bytes", name, len(data))
	if len(data) > maxPlotBytes {
		t.Errorf("%s is %d bytes, want at most %d", name, len(data), maxPlotBytes)
	}
	if strings.EqualFold(filepath.Ext(name), ".png") {
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s is not a PNG: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 800 {
			t.Errorf("%s is %v, too small to read", name, b)
		}
		return
	}
	svg := string(data)
	if !strings.HasPrefix(svg, "<?xml") || !strings.Contains(svg, "<svg") {
		t.Fatalf("%s is not an SVG: %.80q", name, svg)
	}
	for _, r := range results {
		if !strings.Contains(svg, ">"+r.Metrics.Policy+"<") {
			t.Errorf("%s does not name policy %s", name, r.Metrics.Policy)
		}
	}
	if !strings.Contains(svg, ">replay test<") {
		t.Errorf("%s lacks its title", name)
	}
	if n := strings.Count(svg, `<image preserveAspectRatio="none" `); n != len(results)+1 {
		t.Errorf("%s has %d stretchable images, want a heatmap per policy and the colour bar", name, n)
	}
	if strings.Contains(svg, "image/jpg") {
		t.Errorf("%s labels its PNG images as JPEG", name)
	}
}

func TestSavePlot(t *testing.T) {
	dir := t.TempDir()
	results := plotResults(t, 60, 8, 1, allPolicies...)
	checkPlot(t, dir, "figure.png", results)
	checkPlot(t, dir, "figure.SVG", results) // the extension's case does not matter
}

// The size bound's case: 4 policies on 16 workers, 12k requests over an
// hour.
func TestSavePlotLongTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 12k requests four times")
	}
	dir := t.TempDir()
	results := plotResults(t, 3000, 16, 9, allPolicies...)
	if n, end := results[0].Metrics.Requests, results[0].End(); n < 11000 || end < 50*60000 {
		t.Fatalf("the workload has %d requests over %.0f ms, want about 12k over an hour", n, end)
	}
	checkPlot(t, dir, "long.png", results)
	checkPlot(t, dir, "long.svg", results)
}

// One policy on one worker, and eight on 64: the layout must hold at both
// ends of what replay runs.
func TestSavePlotExtremes(t *testing.T) {
	dir := t.TempDir()
	checkPlot(t, dir, "one.png", plotResults(t, 5, 1, 1, protocol.PolicyKV))
	many := append(plotResults(t, 40, 64, 1, allPolicies...), plotResults(t, 40, 64, 1, allPolicies...)...)
	for i := range many[4:] {
		many[4+i].Metrics.Policy += "_again" // eight distinct names
	}
	checkPlot(t, dir, "many.png", many)
	checkPlot(t, dir, "many.svg", many)
}

func TestSavePlotRefuses(t *testing.T) {
	err := CheckFormat("figure.jpg")
	if err == nil || !strings.Contains(err.Error(), "--plot") {
		t.Errorf("CheckFormat(figure.jpg) = %v, want an error naming --plot", err)
	}
	for _, ok := range []string{"a.png", "b.svg", "C.PNG"} {
		if err := CheckFormat(ok); err != nil {
			t.Errorf("CheckFormat(%s) = %v", ok, err)
		}
	}
	if err := SaveReplay(filepath.Join(t.TempDir(), "x.svg"), "none", nil, nil); err == nil {
		t.Error("SaveReplay with no results succeeded")
	}
	if err := SaveReplay(filepath.Join(t.TempDir(), "x.jpg"), "none", nil, plotResults(t, 2, 1, 1, protocol.PolicyKV)); err == nil {
		t.Error("SaveReplay wrote a .jpg")
	}
}
