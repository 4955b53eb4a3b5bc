package benchplot

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Curve is one named line of (x, y) points.
type Curve struct {
	Name   string
	X, Y   []float64
	Dashed bool
}

// Lines writes one line with markers per curve, on linear axes.
func Lines(path, title, xlabel, ylabel string, curves []Curve) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for i, c := range curves {
		if len(c.X) != len(c.Y) {
			return fmt.Errorf("benchplot: curve %q has %d x and %d y", c.Name, len(c.X), len(c.Y))
		}
		xys := make(plotter.XYs, len(c.X))
		for k := range c.X {
			xys[k] = plotter.XY{X: c.X[k], Y: c.Y[k]}
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		col := palette[i%len(palette)]
		l.Color, s.Color = col, col
		s.Shape = draw.CircleGlyph{}
		if c.Dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l, s)
		p.Legend.Add(c.Name, l, s)
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
