package figure

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/replay"
)

// capacityReport is a search of two contenders, one that met the target
// at every probe: a sustainable rate, a lower bound.
func capacityReport() *replay.CapacityReport {
	probe := func(rate, share, p50, p99 float64) replay.CapacityProbe {
		return replay.CapacityProbe{SpeedUp: rate / 4, OfferedRate: rate, Attainment: replay.Estimate{Mean: share}, Met: share >= 0.9,
			MedianTTFTMS: p50, P99TTFTMS: p99}
	}
	failing := 12.0
	return &replay.CapacityReport{AttainmentTarget: 0.9, RelativeTolerance: 0.02, MaxProbes: 12, UnitRate: 4, Repeats: 1, Baseline: "round_robin",
		Contenders: []replay.CapacityResult{
			{Name: "kv", SustainableRate: 16, Bound: replay.BoundAtLeast, Probes: []replay.CapacityProbe{probe(4, 1, 20, 900), probe(16, 0.95, 90, 1100), probe(8, 0.99, 40, 1000)}},
			{Name: "round_robin", SustainableRate: 11.5, FailingRate: &failing, Bound: replay.BoundTolerance,
				Probes: []replay.CapacityProbe{probe(4, 0.97, 160, 1200), probe(8, 0.93, 200, 1500), probe(16, 0.4, 3000, 60000), probe(12, 0.89, 250, 2300), probe(11.5, 0.9, 0, 0)}},
		}}
}

// TestSaveCapacity: the figure is drawn in every format, the same bytes
// each time, naming each contender and the target; a probe where no
// request completed (TTFT 0) is left off the log axis rather than failing
// the figure; no search is refused. Catches a legend without the
// contenders, the target line's label dropped, probes drawn in map or
// arrival order that changes between runs, and a 0 sent to the log axis.
func TestSaveCapacity(t *testing.T) {
	dir := t.TempDir()
	slo := replay.SLO{TTFTMS: 1000, TPOTMS: 50}
	for _, ext := range []string{".png", ".svg", ".pdf"} {
		var saved [2][]byte
		for i := range saved {
			path := filepath.Join(dir, "cap"+string(rune('a'+i))+ext)
			if err := SaveCapacity(path, "capacity at SLO: test", capacityReport(), slo); err != nil {
				t.Fatal(err)
			}
			saved[i], _ = os.ReadFile(path)
		}
		if len(saved[0]) == 0 || !bytes.Equal(saved[0], saved[1]) {
			t.Errorf("%s: %d bytes, then different bytes", ext, len(saved[0]))
		}
		if ext == ".svg" {
			for _, want := range []string{"kv", "round_robin", "target 0.9", "ttft &lt;= 1000 ms, tpot &lt;= 50 ms"} {
				if !strings.Contains(string(saved[0]), want) {
					t.Errorf("the SVG lacks %q", want)
				}
			}
		}
	}
	if err := SaveCapacity(filepath.Join(dir, "none.png"), "x", nil, slo); err == nil {
		t.Error("a figure of no search was drawn")
	}
}
