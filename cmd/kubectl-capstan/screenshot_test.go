package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotutil"
)

// TestTheReportRendersInHeadlessChromium writes a replay report of two configurations and takes
// a screenshot of it in headless Chromium with the network shut off (hack/screenshot.sh, which
// made the picture in docs/): the page must render, with each configuration's line drawn in its
// colour.
func TestTheReportRendersInHeadlessChromium(t *testing.T) {
	dir := t.TempDir()
	tracePath := shortTrace(t, dir)
	page := filepath.Join(dir, "report.html")
	if _, _, err := run("replay", "--trace", tracePath, "--config", "../../examples/replay/whenemptyorunderutilized.yaml",
		"--config", "../../examples/replay/balanced.yaml", "-o", page); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "report.png")
	if out, err := exec.Command("../../hack/screenshot.sh", page, shot, "1280,1560").CombinedOutput(); err != nil {
		t.Fatalf("hack/screenshot.sh: %v\n%s", err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 1560 {
		t.Fatalf("screenshot of %v, want 1280×1560", b)
	}
	// Each configuration's lines, in the plots and their legends.
	for i, name := range []string{"whenemptyorunderutilized", "balanced"} {
		if n := pixelsNear(img, plotutil.Color(i)); n < 200 {
			t.Errorf("%s: %d pixels of its line colour in the screenshot, want at least 200 (its plots drawn)", name, n)
		}
	}
}

// pixelsNear counts the pixels within a small distance of c.
func pixelsNear(img image.Image, c color.Color) int {
	r0, g0, b0, _ := c.RGBA()
	near := func(a, b uint32) bool { d := int(a>>8) - int(b>>8); return d > -40 && d < 40 }
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r, r0) && near(g, g0) && near(bl, b0) {
				n++
			}
		}
	}
	return n
}

// TestHelpListsTheCommandsWithExamples: `kubectl capstan --help`, as a new user runs it first,
// names every command and shows an example of each.
func TestHelpListsTheCommandsWithExamples(t *testing.T) {
	help, _, err := run("--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"explain", "record", "replay", "simulate", "completion"} {
		if !strings.Contains(help, "\n  "+cmd+" ") {
			t.Errorf("--help does not list %s:\n%s", cmd, help)
		}
		if cmd != "completion" && !strings.Contains(help, "kubectl capstan "+cmd+" ") {
			t.Errorf("--help has no example of %s:\n%s", cmd, help)
		}
	}
}
