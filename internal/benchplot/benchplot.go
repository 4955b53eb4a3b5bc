// Package benchplot draws ckf-bench's figures (gonum/plot): query latency
// CDFs, memory per (block, DC) and event→queryable latency against input
// rate. The file name's extension picks the format (.svg, .png, ...).
package benchplot

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one named curve.
type Series struct {
	Name string
	// Sorted durations (a CDF) or, for RateLatency, one value per rate.
	Latencies []time.Duration
	Dashed    bool
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// cdfPoints thins a sorted sample to at most 400 points of (duration in
// unit, fraction); a duration shorter than 0.01 unit is drawn at 0.01 (the
// log axis has no zero).
func cdfPoints(lat []time.Duration, unit time.Duration) plotter.XYs {
	n := len(lat)
	step := max(1, n/400)
	x := func(d time.Duration) float64 { return max(float64(d)/float64(unit), 0.01) }
	var xys plotter.XYs
	for i := 0; i < n; i += step {
		xys = append(xys, plotter.XY{X: x(lat[i]), Y: float64(i+1) / float64(n)})
	}
	xys = append(xys, plotter.XY{X: x(lat[n-1]), Y: 1})
	return xys
}

// LatencyCDF writes the cumulative distribution of each series' sorted
// latencies, in µs on a logarithmic axis.
func LatencyCDF(path, title string, series []Series) error {
	return cdf(path, title, "query latency (µs, log scale)", "fraction of queries ≤ latency", time.Microsecond, series)
}

// TTFTCDF writes the cumulative distribution of each series' sorted times to
// first token, in milliseconds on a logarithmic axis.
func TTFTCDF(path, title string, series []Series) error {
	return cdf(path, title, "time to first token (ms, log scale)", "fraction of requests ≤ TTFT", time.Millisecond, series)
}

// cdf writes the cumulative distribution of each series' sorted durations,
// in unit on a logarithmic x axis.
func cdf(path, title, xlabel, ylabel string, unit time.Duration, series []Series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
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
		l, err := plotter.NewLine(cdfPoints(s.Latencies, unit))
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

// Bar is one group of bars (one per value label).
type Bar struct {
	Name   string
	Values []float64
}

// Bars writes grouped bars: one group per category, one bar per series.
func Bars(path, title, ylabel string, categories []string, series []Bar) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	w := vg.Points(28)
	for i, s := range series {
		if len(s.Values) != len(categories) {
			return fmt.Errorf("benchplot: series %q has %d values for %d categories", s.Name, len(s.Values), len(categories))
		}
		b, err := plotter.NewBarChart(plotter.Values(s.Values), w)
		if err != nil {
			return err
		}
		b.Color = palette[i%len(palette)]
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(series)-1)/2)
		p.Add(b)
		p.Legend.Add(s.Name, b)
		labels, err := barLabels(s.Values, b.Offset)
		if err != nil {
			return err
		}
		p.Add(labels)
	}
	// Headroom above the tallest bar for its label and the legend (one
	// row per series) drawn in the top right corner.
	top := 0.0
	for _, s := range series {
		for _, v := range s.Values {
			top = max(top, v)
		}
	}
	if top > 0 {
		// Rounded up to two significant digits, so the ticks stay round.
		want := top * (1.1 + 0.08*float64(len(series)))
		unit := math.Pow(10, math.Floor(math.Log10(want))-1)
		p.Y.Max = math.Ceil(want/unit) * unit
	}
	p.Legend.Top = true
	p.NominalX(categories...)
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

func barLabels(vs []float64, offset vg.Length) (*plotter.Labels, error) {
	xys := make(plotter.XYs, len(vs))
	text := make([]string, len(vs))
	for i, v := range vs {
		xys[i] = plotter.XY{X: float64(i), Y: v}
		text[i] = fmt.Sprintf("%.3g", v)
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: text})
	if err != nil {
		return nil, err
	}
	l.Offset = vg.Point{X: offset - vg.Points(8), Y: vg.Points(2)}
	return l, nil
}

// RatePoint is one input rate's latency percentiles.
type RatePoint struct {
	Rate     float64
	P50, P99 time.Duration
}

// RateLatency writes latency percentiles against input rate, one line per
// named series (log-scaled latency).
func RateLatency(path, title string, series map[string][]RatePoint, order []string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "input rate (events/s)"
	p.Y.Label.Text = "event → queryable latency (µs, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	i := 0
	for _, name := range order {
		pts := series[name]
		for _, q := range []struct {
			label  string
			get    func(RatePoint) time.Duration
			dashed bool
		}{{"p50", func(r RatePoint) time.Duration { return r.P50 }, false}, {"p99", func(r RatePoint) time.Duration { return r.P99 }, true}} {
			xys := make(plotter.XYs, 0, len(pts))
			for _, r := range pts {
				xys = append(xys, plotter.XY{X: r.Rate, Y: math.Max(float64(q.get(r).Nanoseconds())/1e3, 1)})
			}
			if len(xys) == 0 {
				continue
			}
			l, s, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			c := palette[i%len(palette)]
			l.Color, s.Color = c, c
			s.Shape = draw.CircleGlyph{}
			if q.dashed {
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			p.Add(l, s)
			p.Legend.Add(name+" "+q.label, l, s)
		}
		i++
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
