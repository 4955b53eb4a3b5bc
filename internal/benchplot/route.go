package benchplot

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// TTFTCDF writes the cumulative distribution of each series' sorted times to
// first token, in milliseconds on a logarithmic axis.
func TTFTCDF(path, title string, series []Series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time to first token (ms, log scale)"
	p.Y.Label.Text = "fraction of requests ≤ TTFT"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for i, s := range series {
		if len(s.Latencies) == 0 {
			continue
		}
		if !slices.IsSorted(s.Latencies) {
			return fmt.Errorf("benchplot: series %q is not sorted", s.Name)
		}
		xys := cdfPoints(s.Latencies)
		for k := range xys {
			xys[k].X = math.Max(xys[k].X/1e3, 0.01) // µs → ms
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

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
