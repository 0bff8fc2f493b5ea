package figure

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/offline-router/offline-router/internal/outfile"
)

// svgFixes patch what gonum's SVG writer gets wrong for viewers: it labels
// its embedded PNGs (the heatmaps, the colour bar) as JPEG, which librsvg
// and others then refuse to draw; it lets viewers keep an image's aspect
// ratio, which shrinks a heatmap to the middle of its axes and the colour
// bar to a line; and it names the one font its text was measured in,
// Liberation Serif, with no fallback, where Times New Roman has the same
// metrics and a generic wider serif overflows the layout.
var svgFixes = []struct{ from, to string }{
	{"data:image/jpg;base64,", "data:image/png;base64,"},
	{"<image ", `<image preserveAspectRatio="none" `},
	{"font-family:Liberation Serif;", "font-family:'Liberation Serif','Times New Roman',Times,serif;"},
}

// newCanvas is a canvas for path's format, .svg or else PNG.
func newCanvas(path string, w, h vg.Length) vg.CanvasSizer {
	if strings.ToLower(filepath.Ext(path)) == ".svg" {
		return vgsvg.New(w, h)
	}
	return vgimg.New(w, h)
}

func saveCanvas(path string, canvas vg.CanvasSizer, ext string) error {
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
	if ext == ".svg" {
		for _, f := range svgFixes {
			data = bytes.ReplaceAll(data, []byte(f.from), []byte(f.to))
		}
	}
	return outfile.Write(path, data)
}
