package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

// plotResults replays the built-in workload under each policy: a Result's
// fields are unexported, so a real replay is the way to get one.
func plotResults(t testing.TB, sessions, workers int, policies ...protocol.Policy) []*replay.Result {
	t.Helper()
	var out []*replay.Result
	for _, p := range policies {
		cfg := protocol.DefaultConfig()
		cfg.BlockSize = 512
		cfg.Policy = p
		res, err := replay.Run(replay.Builtin(1, sessions, 512), replay.Options{Cluster: replay.DefaultCluster(workers), Router: cfg})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
	}
	return out
}

var allPolicies = []protocol.Policy{protocol.PolicyKV, protocol.PolicyRoundRobin, protocol.PolicyRandom, protocol.PolicyLeastLoaded}

const maxPlotBytes = 1 << 20

func TestSavePlotPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "figure.png")
	if err := savePlot(path, "replay test", plotResults(t, 60, 8, allPolicies...)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > maxPlotBytes {
		t.Errorf("PNG is %d bytes, want at most %d", len(data), maxPlotBytes)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 800 {
		t.Errorf("PNG is %v, too small to read", b)
	}
}

func TestSavePlotSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "figure.SVG") // the extension's case does not matter
	results := plotResults(t, 60, 8, allPolicies...)
	if err := savePlot(path, "replay test", results); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > maxPlotBytes {
		t.Errorf("SVG is %d bytes, want at most %d", len(data), maxPlotBytes)
	}
	svg := string(data)
	if !strings.HasPrefix(strings.TrimSpace(svg), "<?xml") || !strings.Contains(svg, "<svg") {
		t.Fatalf("not an SVG: %.80q", svg)
	}
	for _, p := range allPolicies {
		if !strings.Contains(svg, ">"+string(p)+"<") {
			t.Errorf("the SVG does not name policy %s", p)
		}
	}
	if !strings.Contains(svg, "replay test") {
		t.Error("the SVG lacks its title")
	}
}

// One policy on one worker, and many on many: the layout must hold at both
// ends of what replay runs.
func TestSavePlotExtremes(t *testing.T) {
	dir := t.TempDir()
	if err := savePlot(filepath.Join(dir, "one.png"), "one", plotResults(t, 5, 1, protocol.PolicyKV)); err != nil {
		t.Fatal(err)
	}
	many := append(plotResults(t, 40, 64, allPolicies...), plotResults(t, 40, 64, allPolicies...)...)
	if err := savePlot(filepath.Join(dir, "many.svg"), "many", many); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "many.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > maxPlotBytes {
		t.Errorf("8 policies × 64 workers: the SVG is %d bytes, want at most %d", fi.Size(), maxPlotBytes)
	}
}

func TestSavePlotRefuses(t *testing.T) {
	err := plotFormat("figure.jpg")
	if err == nil || !strings.Contains(err.Error(), "--plot") {
		t.Errorf("plotFormat(.jpg) = %v, want an error naming --plot", err)
	}
	for _, ok := range []string{"a.png", "b.svg", "C.PNG"} {
		if err := plotFormat(ok); err != nil {
			t.Errorf("plotFormat(%s) = %v", ok, err)
		}
	}
	if err := savePlot(filepath.Join(t.TempDir(), "x.svg"), "none", nil); err == nil {
		t.Error("savePlot with no results succeeded")
	}
}
