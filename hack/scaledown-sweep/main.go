// Command scaledown-sweep draws scale-down shapes from a seed (internal/replay/sweep), plays each
// in the replay with Capstan's defaults and pod deletion costs, and prints, per shape, the settled
// price and the moves beside the LP bound of the pods left and the cheapest no-move set of the
// machines held at the scale-in; then the summary and the marks it misses (exit status 1 when it
// misses any).
//
//	MENU=$(go env GOMODCACHE)/sigs.k8s.io/karpenter@v1.15.0/kwok/cloudprovider/instance_types.json
//	go run ./hack/scaledown-sweep -seed 1 -shapes 300 -kwok-menu "$MENU" -csv /tmp/sweep.csv -svg docs/sweep.svg
//
// The kwok menu is Karpenter's kwok provider's instance_types.json, read as a SimNodeClass's
// instanceTypesFrom reads it (catalog.ParseKWOK); the other menu is the simulated cloud's default
// catalog. Without -kwok-menu only the default catalog is drawn.
package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"

	"capstan.dev/capstan/internal/catalog"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/replay/sweep"
)

func main() {
	seed := flag.Uint64("seed", 1, "the seed the shapes are drawn from")
	shapes := flag.Int("shapes", 300, "how many shapes to draw")
	kwokMenu := flag.String("kwok-menu", "", "Karpenter's kwok instance_types.json (drawn beside the default catalog when set)")
	workers := flag.Int("workers", runtime.GOMAXPROCS(0), "shapes replayed at once")
	csvPath := flag.String("csv", "", "write one row per shape to this file")
	svgPath := flag.String("svg", "", "write the plot (price over the bound, and evictions, per shape) to this file")
	only := flag.Int("shape", -1, "replay only the shape of this index (of the same draw)")
	verbose := flag.Bool("v", false, "print each command the replays carry out")
	flag.Parse()
	var opts sweep.Options
	if *verbose {
		opts.Log = func(s string) { fmt.Println("  ", s) }
	}
	if err := run(*seed, *shapes, *kwokMenu, *workers, *csvPath, *svgPath, *only, opts); err != nil {
		fmt.Fprintln(os.Stderr, "scaledown-sweep:", err)
		os.Exit(2)
	}
}

func run(seed uint64, n int, kwokMenu string, workers int, csvPath, svgPath string, only int, opts sweep.Options) error {
	menus := map[string][]*cloudprovider.InstanceType{}
	var err error
	if menus["capstan"], err = sweep.DefaultCatalog(context.Background()); err != nil {
		return fmt.Errorf("the default catalog: %w", err)
	}
	names := []string{"capstan"}
	if kwokMenu != "" {
		data, err := os.ReadFile(kwokMenu)
		if err != nil {
			return err
		}
		if menus["kwok"], err = catalog.ParseKWOK(data); err != nil {
			return fmt.Errorf("%s: %w", kwokMenu, err)
		}
		names = []string{"kwok", "capstan"}
	}
	drawn := sweep.Draw(seed, n, names)
	if only >= 0 {
		if only >= len(drawn) {
			return fmt.Errorf("-shape %d: the draw has %d shapes", only, len(drawn))
		}
		drawn = drawn[only : only+1]
	}
	results := make([]sweep.Result, len(drawn))
	errs := make([]error, len(drawn))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range max(workers, 1) {
		wg.Go(func() {
			for i := range next {
				results[i], errs[i] = sweep.Play(drawn[i], menus, opts)
				mu.Lock()
				if errs[i] == nil {
					fmt.Println(line(results[i]))
					if opts.Log != nil {
						for _, m := range results[i].End {
							fmt.Printf("   settled: %s %s %s %s %.4f $/h\n", m.Name, m.InstanceType, m.CapacityType, m.Zone, m.Price)
						}
					}
				}
				mu.Unlock()
			}
		})
	}
	for i := range drawn {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if csvPath != "" {
		if err := writeCSV(csvPath, results); err != nil {
			return err
		}
	}
	if svgPath != "" {
		if err := os.WriteFile(svgPath, []byte(plot(results, seed)), 0o644); err != nil {
			return err
		}
	}
	s := sweep.Summarize(results)
	fmt.Printf("\nseed %d, %d shapes: settled/LP bound median %.3f, p95 %.3f; settled/configuration bound median %.3f, p95 %.3f; settled/fresh plan median %.3f, p95 %.3f; worst settled/no-move set %.3f (%d shapes above 1.05); evictions/pods left median %.1f%%, p95 %.1f%%; pods moved twice %d\n",
		seed, s.Shapes, s.OverBoundMedian, s.OverBoundP95, s.OverConfigMedian, s.OverConfigP95, s.OverFreshMedian, s.OverFreshP95,
		s.OverKeepMax, len(s.OverKeepShapes), 100*s.EvictedMedian, 100*s.EvictedP95, s.Twice)
	fails := s.Failures()
	for _, f := range fails {
		fmt.Println("MISSED:", f)
	}
	if len(fails) > 0 {
		os.Exit(1)
	}
	fmt.Println("every mark met")
	return nil
}

// line is one shape's result in one line.
func line(r sweep.Result) string {
	return fmt.Sprintf("%s | ran %s | peak %.3f settled %.3f bound %.3f config %.3f keep %s fresh %.3f | %.3f× bound %.3f× config %s× keep %.3f× fresh | left %d evicted %d twice %d",
		r.Shape, r.RanAfter, r.Peak, r.Settled, r.Bound, r.ConfigBound, num(r.Keep), r.Fresh, r.Settled/r.Bound, r.Settled/r.ConfigBound,
		num(r.Settled/r.Keep), r.Settled/r.Fresh, r.Left, r.Evictions, r.Twice)
}

// num formats a figure that may be infinite (a no-move set too large to compute, or none).
func num(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) || v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func writeCSV(path string, rs []sweep.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"shape", "menu", "capacity", "policy", "deployments", "steps", "first_after_s", "peak", "settled", "bound", "config_bound", "keep", "fresh", "left", "evictions", "twice"})
	for _, r := range rs {
		s := r.Shape
		_ = w.Write([]string{strconv.Itoa(s.Index), s.Menu, s.Capacity, string(s.Policy), strconv.Itoa(len(s.Deployments)), strconv.Itoa(s.Steps),
			strconv.Itoa(int(s.FirstAfter.Seconds())), fmt.Sprintf("%.4f", r.Peak), fmt.Sprintf("%.4f", r.Settled), fmt.Sprintf("%.4f", r.Bound),
			fmt.Sprintf("%.4f", r.ConfigBound), num(r.Keep), fmt.Sprintf("%.4f", r.Fresh), strconv.Itoa(r.Left), strconv.Itoa(r.Evictions), strconv.Itoa(r.Twice)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
