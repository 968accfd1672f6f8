package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Runs of two sides become one row per cell and side with the median and range, and a verdict
// row; a run cut short (no summary line) is left out.
func TestSummarizeMediansAndVerdict(t *testing.T) {
	root := t.TempDir()
	write := func(side, name, last string) {
		t.Helper()
		dir := filepath.Join(root, side)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("reading…\n"+last+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(price float64, ev int) string {
		return summary("Balanced", price, ev)
	}
	write("capstan", "a.log", sum(2.0, 10))
	write("capstan", "b.log", sum(3.0, 30))
	write("capstan", "c.log", sum(2.5, 20))
	write("capstan", "cut.log", "reading only")
	write("karpenter", "a.log", sum(2.4, 40))
	write("karpenter", "b.log", sum(2.6, 50))
	write("karpenter", "c.log", sum(2.5, 60))
	var out strings.Builder
	if err := summarize(&out, []string{filepath.Join(root, "capstan"), filepath.Join(root, "karpenter")}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 1000-700 | Balanced | capstan | 3 | 2.500 [2.000–3.000] | 20 [10–30] | 7.500 |",
		"| 1000-700 | Balanced | karpenter | 3 | 2.500 [2.400–2.600] | 50 [40–60] | 7.500 |",
		"| 1000-700 | Balanced | capstan ≤ karpenter in both medians | | yes | | |",
		"Cells where karpenter evicts more than 10 pods (median): 1; evictions summed: capstan 20, karpenter 50; at most half: yes",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

func summary(policy string, price float64, ev int) string {
	return fmt.Sprintf(`{"scenario":"1000-700","policy":%q,"burst":{"dollarsPerHour":7.5},"end":{"dollarsPerHour":%g,"evictions":%d}}`, policy, price, ev)
}

// Per side, Balanced's median evictions are checked against WhenEmptyOrUnderutilized's in each
// scenario run under both; the evictions summed over the second side's cells of more than 10 are
// compared, half or less.
func TestSummarizeBalancedAgainstWhenEmptyOrUnderutilized(t *testing.T) {
	root := t.TempDir()
	for side, runs := range map[string][][2]any{
		"capstan":   {{"Balanced", 12}, {"WhenEmptyOrUnderutilized", 5}},
		"karpenter": {{"Balanced", 20}, {"WhenEmptyOrUnderutilized", 40}},
	} {
		dir := filepath.Join(root, side)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, r := range runs {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.log", i)), []byte(summary(r[0].(string), 2, r[1].(int))+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var out strings.Builder
	if err := summarize(&out, []string{filepath.Join(root, "capstan"), filepath.Join(root, "karpenter")}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"capstan: Balanced evicts no more than WhenEmptyOrUnderutilized (medians) in the 1 scenarios run under both: no: 1000-700 (12 > 5)",
		"karpenter: Balanced evicts no more than WhenEmptyOrUnderutilized (medians) in the 1 scenarios run under both: yes",
		"Cells where karpenter evicts more than 10 pods (median): 2; evictions summed: capstan 17, karpenter 60; at most half: yes",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
