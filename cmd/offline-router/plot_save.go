package main

import (
	"io"
	"os"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
)

func saveCanvas(path string, canvas vg.CanvasSizer, ext string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	var w io.WriterTo
	if c, ok := canvas.(*vgimg.Canvas); ok {
		w = vgimg.PngCanvas{Canvas: c}
	} else {
		w = canvas.(io.WriterTo)
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
