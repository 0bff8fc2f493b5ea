package figure

import (
	"bytes"
	"compress/zlib"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/offline-router/offline-router/internal/cluster"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/replay"
)

// comparedReport is a report of the results' contenders against
// round_robin, its versus entries made up by hand: kv better on both TTFTs
// and the hit rate, random worse, the long-named kv-scale4 contender tied on
// mean TTFT. The baseline has none, as the report gives it.
func comparedReport(results []*replay.Result, names []string) *replay.Report {
	rep := &replay.Report{}
	d := &rep.Deterministic
	d.Baseline, d.Repeats, d.Seeds = "round_robin", 5, []uint64{0, 1, 2, 3, 4}
	v := func(metric string, ratio, lo, hi float64, better, verdict string) replay.Versus {
		return replay.Versus{Metric: metric, Ratio: ratio, CI95: [2]float64{lo, hi}, Better: better, Verdict: verdict}
	}
	versus := map[string][]replay.Versus{
		"kv": {v("mean_ttft_ms", 0.77, 0.73, 0.81, "lower", "better"), v("p99_ttft_ms", 0.9, 0.85, 0.95, "lower", "better"),
			v("prefix_hit_rate", 1.11, 1.08, 1.14, "higher", "better")},
		"random": {v("mean_ttft_ms", 1.12, 1.05, 1.2, "lower", "worse"), v("p99_ttft_ms", 1.26, 1.1, 1.4, "lower", "worse"),
			v("prefix_hit_rate", 1.0, 0.99, 1.01, "higher", "tie")},
		"kv-scale4-decay-off": {v("mean_ttft_ms", 0.992, 0.976, 1.009, "lower", "tie"), v("p99_ttft_ms", 0.8, 0.7, 0.9, "lower", "better"),
			v("prefix_hit_rate", 1.1, 1.07, 1.13, "higher", "better")},
	}
	for i := range results {
		d.Contenders = append(d.Contenders, replay.ContenderReport{Name: names[i], Policy: results[i].Metrics.Policy, Versus: versus[names[i]]})
	}
	return rep
}

func comparedResults(t *testing.T) ([]*replay.Result, []string) {
	results := plotResults(t, 30, 4, 1, protocol.PolicyKV, protocol.PolicyRoundRobin, protocol.PolicyRandom, protocol.PolicyKV)
	return results, []string{"kv", "round_robin", "random", "kv-scale4-decay-off"}
}

// TestSaveComparison: with versus entries, the figure has the comparison
// row: its title names the baseline, a panel per verdict metric with its
// direction, each contender's change and interval written over its mark,
// and each verdict's mark in its colour, once per verdict of that kind
// and once in the key. Without them, no row.
func TestSaveComparison(t *testing.T) {
	results, names := comparedResults(t)
	rep := comparedReport(results, names)
	dir := t.TempDir()
	path := filepath.Join(dir, "compare.svg")
	if err := SaveReplay(path, "compare test", rep, results); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(data)
	for _, want := range []string{
		">Against the baseline round_robin: each contender",
		">mean TTFT (lower is better)<", ">p99 TTFT (lower is better)<", ">prefix hit rate (higher is better)<",
		">-23.0% [-27.0, -19.0]<", // kv's mean TTFT
		">-0.8% [-2.4, +0.9]<",    // kv-scale4's tie
		">+26.0% [+10.0, +40.0]<", // random's p99
		">kv-scale4-decay-off<",
		">ratio to round_robin<",
		">The ratios pool the requests of 5 repeats; the panels below show repeat 0 alone (seed 0).<",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the figure lacks %q", want)
		}
	}
	if strings.Contains(svg, ">goodput") {
		t.Error("the figure has a goodput panel though no contender has a goodput verdict")
	}
	// Marks by verdict: better 5 (kv 3, kv-scale4 2), worse 2, tie 2;
	// each colour once more in the key.
	for verdict, n := range map[string]int{"better": 5, "worse": 2, "tie": 2} {
		c := verdictMarks[verdict].Color
		r, g, b, _ := c.RGBA()
		colour := regexp.MustCompile(`(?i)(fill|stroke):#` + hex2(r) + hex2(g) + hex2(b) + `\b`)
		if got := len(colour.FindAllString(svg, -1)); got != n+1 {
			t.Errorf("%s: %d marks in its colour, want %d and the key's", verdict, got, n)
		}
	}

	plain := filepath.Join(dir, "plain.svg")
	for i := range rep.Deterministic.Contenders {
		rep.Deterministic.Contenders[i].Versus = nil
	}
	if err := SaveReplay(plain, "compare test", rep, results); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(plain); err != nil || strings.Contains(string(data), "Against the baseline") {
		t.Errorf("a report without versus entries got a comparison row (err %v)", err)
	}
}

func hex2(v uint32) string {
	const digits = "0123456789abcdef"
	b := v >> 8
	return string([]byte{digits[b>>4], digits[b&15]})
}

// TestContenderColors: contenders named after a policy keep its colour;
// two runs of kv, one with overrides, are told apart, and the name the
// figure gives each is its contender's.
func TestContenderColors(t *testing.T) {
	results, names := comparedResults(t)
	ss := contenders(comparedReport(results, names), results)
	for i, s := range ss {
		if s.name != names[i] {
			t.Errorf("series %d is named %q, want its contender's %q", i, s.name, names[i])
		}
	}
	if ss[0].color != policyColor("kv") || ss[1].color != policyColor("round_robin") {
		t.Errorf("kv and round_robin are drawn %v and %v, not their policies' colours", ss[0].color, ss[1].color)
	}
	for i := range ss {
		for j := range i {
			if ss[i].color == ss[j].color {
				t.Errorf("%s and %s share the colour %v", ss[i].name, ss[j].name, ss[i].color)
			}
		}
	}
}

// TestSaveFormats: the SVG embeds its font; the PDF is a PDF with its font
// embedded, no date of its making (the same bytes for the same figure),
// and its text in Windows-1252.
func TestSaveFormats(t *testing.T) {
	results, names := comparedResults(t)
	rep := comparedReport(results, names)
	dir := t.TempDir()
	svg := filepath.Join(dir, "f.svg")
	if err := SaveReplay(svg, "formats", rep, results); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("@font-face")) || !bytes.Contains(data, []byte("data:font/ttf;")) {
		t.Error("the SVG does not embed its font")
	}
	var pdfs [2][]byte
	for i := range pdfs {
		path := filepath.Join(dir, "f.PDF")
		if err := SaveReplay(path, "formats é", rep, results); err != nil {
			t.Fatal(err)
		}
		if pdfs[i], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	pdf := pdfs[0]
	if !bytes.HasPrefix(pdf, []byte("%PDF-")) {
		t.Fatalf("not a PDF: %.20q", pdf)
	}
	t.Logf("f.svg: %d bytes, f.PDF: %d bytes", len(data), len(pdf))
	if !bytes.Contains(pdf, []byte("/FontFile2")) {
		t.Error("the PDF does not embed its font")
	}
	if !bytes.Contains(pdf, []byte("/CreationDate (D:19700101000000)")) {
		t.Error("the PDF is stamped with the time it was made")
	}
	if !bytes.Equal(pdfs[0], pdfs[1]) {
		t.Error("the same figure saved twice gives two PDFs")
	}
	if text := pdfText(t, pdf); !bytes.Contains(text, []byte("(formats \xe9)")) {
		t.Error("the PDF's title is not in Windows-1252")
	}
}

// pdfText is the PDF's page content, inflated.
func pdfText(t *testing.T, pdf []byte) []byte {
	var out []byte
	for _, m := range regexp.MustCompile(`(?s)stream\r?\n(.*?)endstream`).FindAllSubmatch(pdf, -1) {
		r, err := zlib.NewReader(bytes.NewReader(m[1]))
		if err != nil {
			continue // not deflated: an image's raw data
		}
		b, _ := io.ReadAll(r)
		out = append(out, b...)
	}
	return out
}

func TestWindows1252(t *testing.T) {
	if got := windows1252("TTFT ≤ x, é×"); got != "TTFT ? x, \xe9\xd7" {
		t.Errorf("windows1252 = %q", got)
	}
}

// TestSavePD: a disaggregated replay's heatmap names its rows by pool,
// P1 to P2 below and D1 to D3 above, and both pools carry load.
func TestSavePD(t *testing.T) {
	cfg := protocol.DefaultConfig()
	cfg.BlockSize = 512
	cfg.Policy = protocol.PolicyKV
	cluster := cluster.Default(3)
	cluster.PrefillWorkers, cluster.DecodeWorkers, cluster.Workers, cluster.KVTransferGBps = 2, 3, 3, 50 // replay's default bandwidth
	res, err := replay.Run(replay.Builtin(1, 20, 0, 512), replay.Options{Cluster: cluster, Router: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if res.Workers != 5 {
		t.Fatalf("%d workers, want 2 prefill and 3 decode", res.Workers)
	}
	load := res.LoadByWindow(res.End()/10, 10)
	for w, row := range load {
		sum := 0.0
		for _, v := range row {
			sum += v
		}
		if sum == 0 {
			t.Errorf("worker %d (of 2 prefill, then 3 decode) carries no load", w)
		}
	}
	path := filepath.Join(t.TempDir(), "pd.svg")
	if err := SaveReplay(path, "pd", nil, []*replay.Result{res}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(data)
	for _, want := range []string{">P1<", ">P2<", ">D1<", ">D3<", "P prefill and D decode"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the P/D heatmap lacks %q", want)
		}
	}
	if strings.Contains(svg, ">D4<") || strings.Contains(svg, ">P3<") {
		t.Error("the P/D heatmap labels a worker a pool does not have")
	}
	ts := poolTicks(2, 3)
	for _, tk := range ts {
		if tk.Label == "D1" && tk.Value != 3 {
			t.Errorf("D1 is drawn at row %v, want 3, above the two prefill workers", tk.Value)
		}
	}
}
