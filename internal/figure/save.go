package figure

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"codeberg.org/go-pdf/fpdf"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/offline-router/offline-router/internal/outfile"
)

// CheckFormat checks that path names a format the plot can be drawn in.
func CheckFormat(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png", ".svg", ".pdf":
		return nil
	}
	return fmt.Errorf("--plot %s: the file must end in .png, .svg or .pdf", path)
}

// svgFixes patch what gonum's SVG writer gets wrong for viewers: it labels
// its embedded PNGs (the heatmaps, the colour bar) as JPEG, which librsvg
// and others then refuse to draw; it lets viewers keep an image's aspect
// ratio, which shrinks a heatmap to the middle of its axes and the colour
// bar to a line; and it names the one font its text was measured in,
// Liberation Serif, with no fallback: the font is embedded, but a viewer
// that ignores embedded fonts (librsvg does) then falls back to Times New
// Roman, of the same metrics, rather than to a wider serif that overflows
// the layout.
var svgFixes = []struct{ from, to string }{
	{"data:image/jpg;base64,", "data:image/png;base64,"},
	{"<image ", `<image preserveAspectRatio="none" `},
	{"font-family:Liberation Serif;", "font-family:'Liberation Serif','Times New Roman',Times,serif;"},
}

// pdfDefaults makes a PDF the same bytes for the same figure: fpdf stamps
// its documents with the time they were made, unless told a date, and
// writes its catalogues in map order, unless told to sort them. Both are
// package settings of fpdf, set once before the first PDF.
var pdfDefaults = sync.OnceFunc(func() {
	fpdf.SetDefaultCreationDate(time.Unix(0, 0).UTC())
	fpdf.SetDefaultModificationDate(time.Unix(0, 0).UTC())
	fpdf.SetDefaultCatalogSort(true)
})

// newCanvas is a canvas for path's format: SVG and PDF with their fonts
// embedded, so that a viewer without the Liberation fonts draws the text
// the layout was measured in; else PNG.
func newCanvas(path string, w, h vg.Length) vg.CanvasSizer {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		return vgsvg.NewWith(vgsvg.UseWH(w, h), vgsvg.EmbedFonts(true))
	case ".pdf":
		pdfDefaults()
		c := vgpdf.New(w, h)
		c.EmbedFonts(true) // the default; said, since the figure relies on it
		return c
	}
	return vgimg.New(w, h)
}

func saveCanvas(path string, canvas vg.CanvasSizer) error {
	var w io.WriterTo
	if c, ok := canvas.(*vgimg.Canvas); ok {
		w = vgimg.PngCanvas{Canvas: c}
	} else {
		w = canvas.(io.WriterTo)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return err
	}
	data := buf.Bytes()
	if strings.EqualFold(filepath.Ext(path), ".svg") {
		for _, f := range svgFixes {
			data = bytes.ReplaceAll(data, []byte(f.from), []byte(f.to))
		}
	}
	return outfile.Write(path, data)
}
