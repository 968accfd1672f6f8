// Command scaledown-summary reads the results of hack/scaledown runs (each file's last line is
// the run's JSON summary) and prints, per cell (scenario and policy) and side, the median and range
// of the settled price and of the pods evicted after the scale-down, and whether the first side's
// medians are at most the second's in both; then, over the cells, the pods the first side evicts
// where the second evicts more than 10 (medians summed), and per scenario whether Balanced evicts
// no more than WhenEmptyOrUnderutilized on each side.
//
//	go run ./hack/scaledown-summary DIR...     # each DIR one side, named for it (capstan, karpenter)
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// result is what a run's summary line says of its end.
type result struct {
	Scenario string `json:"scenario"`
	Policy   string `json:"policy"`
	End      struct {
		Price     float64 `json:"dollarsPerHour"`
		Evictions int     `json:"evictions"`
	} `json:"end"`
	Burst struct {
		Price float64 `json:"dollarsPerHour"`
	} `json:"burst"`
}

// cell is a scenario under a policy.
type cell struct{ scenario, policy string }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: scaledown-summary DIR... (one directory of hack/scaledown results per side)")
		os.Exit(2)
	}
	if err := summarize(os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "scaledown-summary:", err)
		os.Exit(1)
	}
}

func summarize(w io.Writer, dirs []string) error {
	runs := map[cell]map[string][]result{}
	var sides []string
	for _, dir := range dirs {
		side := filepath.Base(dir)
		sides = append(sides, side)
		files, err := filepath.Glob(filepath.Join(dir, "*.log"))
		if err != nil {
			return err
		}
		for _, f := range files {
			r, ok, err := lastSummary(f)
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if !ok {
				continue // a run cut short: no summary line
			}
			c := cell{r.Scenario, r.Policy}
			if runs[c] == nil {
				runs[c] = map[string][]result{}
			}
			runs[c][side] = append(runs[c][side], r)
		}
	}
	cells := make([]cell, 0, len(runs))
	for c := range runs {
		cells = append(cells, c)
	}
	sort.Slice(cells, func(i, j int) bool {
		return cells[i].scenario < cells[j].scenario || cells[i].scenario == cells[j].scenario && cells[i].policy < cells[j].policy
	})
	// medians[c][side] = {price, evictions}
	medians := map[cell]map[string][2]float64{}
	fmt.Fprintln(w, "| scenario | policy | side | runs | settled $/h: median [min–max] | evicted: median [min–max] | burst $/h median |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, c := range cells {
		for _, side := range sides {
			rs := runs[c][side]
			if len(rs) == 0 {
				continue
			}
			price := values(rs, func(r result) float64 { return r.End.Price })
			ev := values(rs, func(r result) float64 { return float64(r.End.Evictions) })
			burst := values(rs, func(r result) float64 { return r.Burst.Price })
			fmt.Fprintf(w, "| %s | %s | %s | %d | %.3f [%.3f–%.3f] | %.0f [%.0f–%.0f] | %.3f |\n", c.scenario, c.policy, side, len(rs),
				median(price), price[0], price[len(price)-1], median(ev), ev[0], ev[len(ev)-1], median(burst))
			if medians[c] == nil {
				medians[c] = map[string][2]float64{}
			}
			medians[c][side] = [2]float64{median(price), median(ev)}
		}
		if len(sides) == 2 && len(medians[c]) == 2 {
			a, b := medians[c][sides[0]], medians[c][sides[1]]
			verdict := "no"
			if a[0] <= b[0] && a[1] <= b[1] {
				verdict = "yes"
			}
			fmt.Fprintf(w, "| %s | %s | %s ≤ %s in both medians | | %s | | |\n", c.scenario, c.policy, sides[0], sides[1], verdict)
		}
	}
	fmt.Fprintln(w)
	if len(sides) == 2 {
		var mine, theirs float64
		n := 0
		for _, c := range cells {
			m, ok := medians[c][sides[0]]
			t, tok := medians[c][sides[1]]
			if !ok || !tok || t[1] <= 10 {
				continue
			}
			n++
			mine, theirs = mine+m[1], theirs+t[1]
		}
		verdict := "no"
		if 2*mine <= theirs {
			verdict = "yes"
		}
		fmt.Fprintf(w, "Cells where %s evicts more than 10 pods (median): %d; evictions summed: %s %.0f, %s %.0f; at most half: %s\n",
			sides[1], n, sides[0], mine, sides[1], theirs, verdict)
	}
	for _, side := range sides {
		var worse []string
		compared := 0
		for _, c := range cells {
			if c.policy != "Balanced" {
				continue
			}
			b, ok := medians[c][side]
			u, uok := medians[cell{c.scenario, "WhenEmptyOrUnderutilized"}][side]
			if !ok || !uok {
				continue
			}
			compared++
			if b[1] > u[1] {
				worse = append(worse, fmt.Sprintf("%s (%.0f > %.0f)", c.scenario, b[1], u[1]))
			}
		}
		verdict := "yes"
		if len(worse) > 0 {
			verdict = "no: " + strings.Join(worse, ", ")
		}
		fmt.Fprintf(w, "%s: Balanced evicts no more than WhenEmptyOrUnderutilized (medians) in the %d scenarios run under both: %s\n", side, compared, verdict)
	}
	return nil
}

// values are the runs' values, sorted.
func values(rs []result, f func(result) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	slices.Sort(out)
	return out
}

// median of sorted values.
func median(v []float64) float64 {
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// lastSummary is the file's last line read as a run's summary; false when it is not one.
func lastSummary(path string) (result, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return result{}, false, err
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			last = line
		}
	}
	if err := sc.Err(); err != nil {
		return result{}, false, err
	}
	var r result
	if !strings.HasPrefix(last, "{") || json.Unmarshal([]byte(last), &r) != nil || r.Scenario == "" {
		return result{}, false, nil
	}
	return r, true, nil
}
