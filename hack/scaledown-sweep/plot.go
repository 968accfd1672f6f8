package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"capstan.dev/capstan/internal/replay/sweep"
)

// plot draws the sweep as an SVG: one point per shape in each of two panels, the settled price
// over the LP bound and the evictions over the pods left, shapes sorted by the panel's figure,
// with the marks as dashed lines; WhenEmptyOrUnderutilized in blue, Balanced in orange. Each panel
// has a fixed frame (3 times the bound, all the pods left); a point beyond it is drawn at its top.
func plot(rs []sweep.Result, seed uint64) string {
	const w, h, pad = 420.0, 260.0, 40.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", int(2*w), int(h+24))
	fmt.Fprintf(&b, `<text x="%d" y="14">scale-down sweep, seed %d, %d shapes: each point one shape, sorted by the panel's figure</text>`+"\n", int(pad), seed, len(rs))
	panel := func(x0 float64, title string, value func(sweep.Result) float64, top float64, marks []float64, label func(float64) string) {
		vs := slices.Clone(rs)
		slices.SortStableFunc(vs, func(a, b sweep.Result) int { return cmp.Compare(value(a), value(b)) })
		bottom := 0.0
		if title[0] == 's' {
			bottom = 1
		}
		y := func(v float64) float64 {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				v = top
			}
			return 20 + (h-pad)*(1-(min(v, top)-bottom)/(top-bottom))
		}
		x := func(i int) float64 { return x0 + pad + (w-2*pad)*float64(i)/float64(max(len(vs)-1, 1)) }
		fmt.Fprintf(&b, `<text x="%.0f" y="32">%s</text>`+"\n", x0+pad, title)
		fmt.Fprintf(&b, `<rect x="%.0f" y="20" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0+pad, w-2*pad, h-pad)
		for _, t := range []float64{bottom, (bottom + top) / 2, top} {
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0+pad-4, y(t)+4, label(t))
		}
		for _, m := range marks {
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#c00" stroke-dasharray="4 3"/>`+"\n", x0+pad, x0+w-pad, y(m), y(m))
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" fill="#c00">%s</text>`+"\n", x0+w-pad+2, y(m)+4, label(m))
		}
		for i, r := range vs {
			color := "#1f77b4"
			if r.Shape.Policy == "Balanced" {
				color = "#ff7f0e"
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.2" fill="%s"/>`+"\n", x(i), y(value(r)), color)
		}
	}
	panel(0, "settled price / LP bound (above 3: at the top)", func(r sweep.Result) float64 { return r.Settled / r.Bound }, 3, []float64{1.05, 1.20},
		func(v float64) string { return fmt.Sprintf("%.2f", v) })
	panel(w, "evictions / pods left", func(r sweep.Result) float64 { return float64(r.Evictions) / float64(max(r.Left, 1)) }, 1, []float64{0.10},
		func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) })
	fmt.Fprintf(&b, `<circle cx="%.0f" cy="%.0f" r="3" fill="#1f77b4"/><text x="%.0f" y="%.0f">WhenEmptyOrUnderutilized</text>`+"\n", pad+4, h+8, pad+12, h+12)
	fmt.Fprintf(&b, `<circle cx="%.0f" cy="%.0f" r="3" fill="#ff7f0e"/><text x="%.0f" y="%.0f">Balanced</text>`+"\n", pad+184, h+8, pad+192, h+12)
	b.WriteString("</svg>\n")
	return b.String()
}
