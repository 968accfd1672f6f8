// Package report plays a workload trace through Capstan's solver and disruption decision core
// (internal/replay) once per configuration and writes what happened as a self-contained HTML
// page: plots of nodes, $/h, cumulative cost, pending pods and evictions over time, one line per
// configuration, and a table of totals. It is what `kubectl capstan replay` writes.
package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/replay"
	"capstan.dev/capstan/internal/trace"
)

// Config is one way to run the trace: a NodePool (its policy, budgets, consolidateAfter and
// requirements), the instance types it may use, and the decision core's options.
type Config struct {
	Name            string
	NodePool        *karpv1.NodePool
	InstanceTypes   []*cloudprovider.InstanceType
	Decision        disruptionplan.Options
	PodDeletionCost bool
}

// Run is what one configuration did: a sample per step and the totals.
type Run struct {
	Name    string  `json:"name"`
	Samples []Point `json:"-"`
	Totals  Totals  `json:"totals"`
}

// Point is the cluster after one step.
type Point struct {
	At        time.Duration
	Nodes     int
	Price     float64
	CostSoFar float64
	Pending   int
	Evictions int
}

// Totals sum a run.
type Totals struct {
	// CostHours is the dollars spent ($/h summed over the hours).
	CostHours         float64 `json:"costHours"`
	Evictions         int     `json:"evictions"`
	MovedTwice        int     `json:"movedTwice"`
	Interrupted       int     `json:"interrupted"`
	PendingPodSeconds float64 `json:"pendingPodSeconds"`
	PeakNodes         int     `json:"peakNodes"`
	Launched          int     `json:"launched"`
}

// Play runs the trace once per configuration.
func Play(t *trace.Trace, cfgs []Config) ([]Run, error) {
	deps := t.Deployments()
	step := t.StepOrDefault()
	var runs []Run
	for _, cfg := range cfgs {
		c, err := replay.New(replay.Config{NodePool: cfg.NodePool, InstanceTypes: cfg.InstanceTypes, Step: step,
			Disruption: cfg.Decision, PodDeletionCost: cfg.PodDeletionCost})
		if err != nil {
			return nil, fmt.Errorf("configuration %s: %w", cfg.Name, err)
		}
		run := Run{Name: cfg.Name}
		interruptions := t.Spec.Interruptions
		for at := time.Duration(0); at < t.Spec.Duration.Duration; at += step {
			for len(interruptions) > 0 && interruptions[0].At.Duration <= at {
				c.InterruptSpot(interruptions[0].Fraction)
				interruptions = interruptions[1:]
			}
			r := c.Run(deps, step)
			run.Samples = append(run.Samples, Point{At: at + step, Nodes: c.Nodes(), Price: c.Price(), CostSoFar: r.CostHours,
				Pending: c.Pending(), Evictions: r.Evictions})
		}
		r := c.Report()
		run.Totals = Totals{CostHours: r.CostHours, Evictions: r.Evictions, MovedTwice: r.Reevictions, Interrupted: r.Interrupted,
			PendingPodSeconds: r.PendingPodSeconds, PeakNodes: r.PeakNodes, Launched: r.Launched}
		runs = append(runs, run)
	}
	return runs, nil
}

// chart is one plot of the page: a value of each sample, one line per run.
type chart struct {
	title, unit string
	value       func(Point) float64
}

var charts = []chart{
	{"Nodes", "nodes", func(p Point) float64 { return float64(p.Nodes) }},
	{"Price", "$/h", func(p Point) float64 { return p.Price }},
	{"Cumulative cost", "$", func(p Point) float64 { return p.CostSoFar }},
	{"Pending pods", "pods", func(p Point) float64 { return float64(p.Pending) }},
	{"Evictions (cumulative)", "pods", func(p Point) float64 { return float64(p.Evictions) }},
}

// svg draws one chart as an SVG document.
func svg(c chart, runs []Run) (template.HTML, error) {
	p := plot.New()
	p.Title.Text = c.title
	p.X.Label.Text = "hours"
	p.Y.Label.Text = c.unit
	p.Legend.Top = true
	for i, r := range runs {
		xys := make(plotter.XYs, len(r.Samples))
		for j, s := range r.Samples {
			xys[j] = plotter.XY{X: s.At.Hours(), Y: c.value(s)}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return "", err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(r.Name, l)
	}
	p.Add(plotter.NewGrid())
	canvas := vgsvg.New(7*vg.Inch, 2.6*vg.Inch)
	p.Draw(draw.New(canvas))
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return "", err
	}
	// The SVG is ours, drawn from numbers: safe to inline.
	return template.HTML(buf.String()), nil
}

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #bbb; padding: 0.3em 0.8em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.chart { margin: 0.5em 0; }
</style></head>
<body>
<h1>{{.Title}}</h1>
<p>{{.Description}}</p>
<table id="summary">
<tr><th>configuration</th><th>cost ($)</th><th>evictions</th><th>moved twice</th><th>interrupted</th><th>pod-seconds pending</th><th>peak nodes</th><th>machines launched</th></tr>
{{range .Runs}}<tr data-config="{{.Name}}"><td>{{.Name}}</td><td class="cost">{{printf "%.2f" .Totals.CostHours}}</td><td class="evictions">{{.Totals.Evictions}}</td><td class="moved-twice">{{.Totals.MovedTwice}}</td><td class="interrupted">{{.Totals.Interrupted}}</td><td class="pending">{{printf "%.0f" .Totals.PendingPodSeconds}}</td><td class="peak-nodes">{{.Totals.PeakNodes}}</td><td class="launched">{{.Totals.Launched}}</td></tr>
{{end}}</table>
{{range .Charts}}<div class="chart">{{.}}</div>
{{end}}
</body></html>
`))

// WriteHTML writes the runs as one self-contained page (the plots are inline SVG: nothing is
// fetched to view it).
func WriteHTML(w io.Writer, title, description string, runs []Run) error {
	var svgs []template.HTML
	for _, c := range charts {
		s, err := svg(c, runs)
		if err != nil {
			return fmt.Errorf("drawing %s: %w", c.title, err)
		}
		svgs = append(svgs, s)
	}
	return page.Execute(w, struct {
		Title, Description string
		Runs               []Run
		Charts             []template.HTML
	}{title, description, runs, svgs})
}
