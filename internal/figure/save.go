package figure

import (
	"bytes"
	"fmt"
	"image"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"codeberg.org/go-pdf/fpdf"
	"golang.org/x/text/encoding/charmap"
	"gonum.org/v1/plot/font"
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
// Liberation Serif, with no fallback. The font is embedded, but a viewer
// that ignores embedded fonts (librsvg does) then falls back to the first
// it has of Times New Roman and Nimbus Roman, of the same metrics, or
// DejaVu Serif Condensed, about as wide, rather than to a wider serif that
// overflows the layout.
var svgFixes = []struct{ from, to string }{
	{"data:image/jpg;base64,", "data:image/png;base64,"},
	{"<image ", `<image preserveAspectRatio="none" `},
	{"font-family:Liberation Serif;", "font-family:'Liberation Serif','Times New Roman',Times,'Nimbus Roman','DejaVu Serif Condensed',serif;"},
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
		return pdfCanvas{c, new(int)}
	}
	return vgimg.New(w, h)
}

// pdfCanvas corrects three faults of vgpdf and fpdf. It hands vgpdf its
// text in Windows-1252, the code page vgpdf writes its fonts in: given
// UTF-8, it writes the bytes as they are, and a viewer reads "≤" as "â‰¤"
// (a character the code page lacks becomes "?"). It turns images upside
// down first: vgpdf draws them in its page's flipped coordinates, so that
// a heatmap's first worker and the colour bar's 0 came out on top. And it
// gives each image a width of its own: fpdf writes its images in map
// order sorted by width alone, so images of one width (the heatmaps)
// came out in a different order each time; the k-th image drawn gets k
// more columns, copies of its last, drawn in the same rectangle (k of
// some thousand columns: too little to see).
type pdfCanvas struct {
	*vgpdf.Canvas
	images *int
}

func (c pdfCanvas) DrawImage(rect vg.Rectangle, img image.Image) {
	b := img.Bounds()
	extra := *c.images
	*c.images++
	flipped := image.NewRGBA(image.Rect(0, 0, b.Dx()+extra, b.Dy()))
	for y := range b.Dy() {
		for x := range b.Dx() + extra {
			flipped.Set(x, b.Dy()-1-y, img.At(b.Min.X+min(x, b.Dx()-1), b.Min.Y+y))
		}
	}
	c.Canvas.DrawImage(rect, flipped)
}

func (c pdfCanvas) FillString(f font.Face, pt vg.Point, s string) {
	c.Canvas.FillString(f, pt, windows1252(s))
}

func windows1252(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if cp, ok := charmap.Windows1252.EncodeRune(r); ok {
			b = append(b, cp)
		} else {
			b = append(b, '?')
		}
	}
	return string(b)
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
