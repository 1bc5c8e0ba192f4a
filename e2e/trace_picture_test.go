package e2e_test

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"sort"
	"testing"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// EnvTracePicture names a PNG file TestOneTracePerJob draws the job's
// trace into, as a waterfall: how docs/img/job-trace.png is made
// (PULSE_E2E_TRACE_PNG=$PWD/docs/img/job-trace.png go test -run TestOneTracePerJob ./e2e).
const EnvTracePicture = "PULSE_E2E_TRACE_PNG"

var serviceColors = map[string]color.RGBA{
	"e2e-sdk":          {0x4e, 0x79, 0xa7, 0xff},
	"control-api":      {0xf2, 0x8e, 0x2b, 0xff},
	"dispatch-gateway": {0x59, 0xa1, 0x4f, 0xff},
	"reaper":           {0xe1, 0x57, 0x59, 0xff},
}

// drawTrace renders spans as a waterfall: one row per span in start order,
// indented by depth, bars on a shared time axis, colored by service.
func drawTrace(t *testing.T, path string, spans []receivedSpan) {
	t.Helper()
	sort.Slice(spans, func(i, j int) bool {
		return spans[i].span.GetStartTimeUnixNano() < spans[j].span.GetStartTimeUnixNano()
	})
	byID := map[string]receivedSpan{}
	for _, s := range spans {
		byID[string(s.span.GetSpanId())] = s
	}
	depth := func(s receivedSpan) int {
		d := 0
		for p, ok := byID[string(s.span.GetParentSpanId())]; ok && d < 20; p, ok = byID[string(p.span.GetParentSpanId())] {
			d++
		}
		return d
	}
	start, end := spans[0].span.GetStartTimeUnixNano(), uint64(0)
	for _, s := range spans {
		end = max(end, s.span.GetEndTimeUnixNano())
	}
	const rowH, labelW, barW, pad = 22, 430, 560, 10
	w, h := labelW+barW+2*pad, (len(spans)+2)*rowH+2*pad
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), &image.Uniform{color.White}, image.Point{}, draw.Src)
	text := func(x, y int, s string, c color.Color) {
		d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
		d.DrawString(s)
	}
	total := float64(end - start)
	text(pad, pad+13, fmt.Sprintf("one job, two attempts: %d spans, %.1f ms", len(spans), total/1e6), color.Black)
	for i, s := range spans {
		y := pad + (i+1)*rowH
		label := fmt.Sprintf("%*s%s: %s", 2*depth(s), "", s.service, s.span.GetName())
		if len(label) > 60 {
			label = label[:60]
		}
		text(pad, y+15, label, color.Black)
		x0 := labelW + pad + int(float64(s.span.GetStartTimeUnixNano()-start)/total*barW)
		x1 := labelW + pad + int(float64(s.span.GetEndTimeUnixNano()-start)/total*barW)
		if x1 <= x0 {
			x1 = x0 + 2
		}
		c, ok := serviceColors[s.service]
		if !ok {
			c = color.RGBA{0x88, 0x88, 0x88, 0xff}
		}
		draw.Draw(img, image.Rect(x0, y+4, x1, y+rowH-4), &image.Uniform{c}, image.Point{}, draw.Src)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("trace picture: %v", err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatalf("trace picture: %v", err)
	}
	t.Logf("trace picture written to %s", path)
}
