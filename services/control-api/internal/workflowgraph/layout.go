// Package workflowgraph lays a workflow's dependency graph out for the
// dashboard's server-rendered SVG: layered by depth (a job's layer is the
// longest path to it from a job without parents), left to right, each
// layer's jobs stacked in an order that keeps edges short. It is pure —
// no I/O, no clock — and caps what it places: at most MaxPerLayer jobs a
// layer and MaxLayers layers are drawn, the rest summarised by a box per
// layer that counts them by state, so a 10,000-job workflow draws a page
// of a few hundred shapes, never 10,000.
package workflowgraph

import (
	"cmp"
	"slices"
	"strconv"
)

// Node is one job of the graph.
type Node struct {
	// ID is the job's id; Label what the box shows (its topic); Status the
	// job's status (PENDING, RUNNING, ..., the colour).
	ID     string
	Label  string
	Status string
}

// Edge is a dependency: Child waits for Parent.
type Edge struct {
	Parent, Child string
}

// Limits bound what a layout draws. Zero fields take the defaults.
type Limits struct {
	// MaxPerLayer is how many jobs a layer draws; the rest of the layer is
	// one summary box.
	MaxPerLayer int
	// MaxLayers is how many layers are drawn; the jobs of deeper layers
	// are counted in one last summary box.
	MaxLayers int
	// MaxEdges is how many edges are drawn (the rest are counted).
	MaxEdges int
	// LabelRunes cuts a label to this many characters (an ellipsis marks
	// the cut).
	LabelRunes int
}

// Defaults of Limits.
const (
	DefaultMaxPerLayer = 25
	DefaultMaxLayers   = 40
	DefaultMaxEdges    = 1500
	DefaultLabelRunes  = 22
)

// Geometry of a layout, in the SVG's own units.
const (
	NodeWidth  = 176
	NodeHeight = 38
	ColumnGap  = 64 // between one layer's boxes and the next's
	RowGap     = 12 // between two boxes of a layer
	Margin     = 16
)

// statusRank orders a capped layer's jobs: the ones an operator looks for
// first are drawn first (a dead letter is never summarised away while
// completed jobs are drawn).
var statusRank = map[string]int{
	"DEAD_LETTERED": 0, "CANCELED": 1, "RUNNING": 2, "RETRYING": 3, "PENDING": 4, "COMPLETED": 5,
}

// Box is a placed job: its node, its layer and its top-left corner.
type Box struct {
	Node
	Layer int
	X, Y  float64
	// Short is Label cut to Limits.LabelRunes.
	Short string
}

// Summary is a placed box standing for jobs not drawn: Count of them, by
// status. Layer is -1 for the box of every layer past MaxLayers (drawn
// after the last layer).
type Summary struct {
	Layer    int
	X, Y     float64
	Count    int
	ByStatus []StatusCount
}

// StatusCount is how many of a summary's jobs are in Status.
type StatusCount struct {
	Status string
	Count  int
}

// Line is a placed edge: a cubic curve from the parent's right edge to
// the child's left edge, as an SVG path's d.
type Line struct {
	Parent, Child string
	D             string
}

// Layout is a graph placed in a viewBox of Width × Height.
type Layout struct {
	Width, Height float64
	Boxes         []Box
	Summaries     []Summary
	Lines         []Line
	// Layers is the graph's depth (layers including those not drawn);
	// Jobs and Edges the graph's sizes; Drawn how many jobs have a box,
	// HiddenEdges how many edges have no line (an end not drawn, or past
	// MaxEdges).
	Layers, Jobs, Edges, Drawn, HiddenEdges int
	// Unplaced counts jobs on a cycle or whose depth could not be found
	// (never, for a graph the schema accepted); they are drawn in the
	// last layer.
	Unplaced int
}

// Lay places g. Edges naming a job not in g are ignored (counted in
// HiddenEdges). The result depends only on g and the limits: nodes of a
// layer are ordered by the mean position of their parents, ties by
// their order in g.Nodes.
func Lay(g []Node, edges []Edge, lim Limits) Layout {
	lim = lim.withDefaults()
	index := make(map[string]int, len(g))
	for i, n := range g {
		if _, dup := index[n.ID]; !dup {
			index[n.ID] = i
		}
	}
	parents := make([][]int, len(g))
	children := make([][]int, len(g))
	indeg := make([]int, len(g))
	for _, e := range edges {
		p, okp := index[e.Parent]
		c, okc := index[e.Child]
		if !okp || !okc || p == c {
			continue
		}
		parents[c] = append(parents[c], p)
		children[p] = append(children[p], c)
		indeg[c]++
	}

	// Depth by Kahn's algorithm: a job's layer is one past its deepest
	// parent's.
	layer := make([]int, len(g))
	for i := range layer {
		layer[i] = -1
	}
	queue := make([]int, 0, len(g))
	for i := range g {
		if index[g[i].ID] == i && indeg[i] == 0 {
			queue = append(queue, i)
			layer[i] = 0
		}
	}
	for q := 0; q < len(queue); q++ {
		p := queue[q]
		for _, c := range children[p] {
			layer[c] = max(layer[c], layer[p]+1)
			if indeg[c]--; indeg[c] == 0 {
				queue = append(queue, c)
			}
		}
	}
	depth := 0
	for _, l := range layer {
		depth = max(depth, l+1)
	}
	out := Layout{Jobs: len(index), Edges: len(edges)}
	for i := range g {
		if index[g[i].ID] != i {
			continue // a duplicate id: the first one stands
		}
		if indeg[i] > 0 { // on a cycle, or below one
			layer[i] = depth
			out.Unplaced++
		}
	}
	if out.Unplaced > 0 {
		depth++
	}
	out.Layers = depth

	// Jobs by layer, in their order of g.
	byLayer := make([][]int, depth)
	for i := range g {
		if index[g[i].ID] == i {
			byLayer[layer[i]] = append(byLayer[layer[i]], i)
		}
	}

	// Place layer by layer: order by the parents' mean row (barycenter),
	// draw the first MaxPerLayer by status rank then that order.
	row := make([]float64, len(g)) // a drawn job's row, or its summary's
	drawn := make([]bool, len(g))
	rows := 0
	drawLayers := min(depth, lim.MaxLayers)
	for l := range drawLayers {
		ids := byLayer[l]
		bary := make(map[int]float64, len(ids))
		for _, i := range ids {
			if len(parents[i]) == 0 {
				bary[i] = float64(len(bary))
				continue
			}
			s := 0.0
			for _, p := range parents[i] {
				s += row[p]
			}
			bary[i] = s / float64(len(parents[i]))
		}
		slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(bary[a], bary[b]) })
		shown := ids
		var hidden []int
		if len(ids) > lim.MaxPerLayer {
			ranked := slices.Clone(ids)
			slices.SortStableFunc(ranked, func(a, b int) int { return cmp.Compare(rank(g[a].Status), rank(g[b].Status)) })
			keep := make(map[int]bool, lim.MaxPerLayer)
			for _, i := range ranked[:lim.MaxPerLayer] {
				keep[i] = true
			}
			shown = shown[:0:0]
			for _, i := range ids {
				if keep[i] {
					shown = append(shown, i)
				} else {
					hidden = append(hidden, i)
				}
			}
		}
		x := float64(Margin + l*(NodeWidth+ColumnGap))
		for r, i := range shown {
			row[i], drawn[i] = float64(r), true
			out.Boxes = append(out.Boxes, Box{
				Node: g[i], Layer: l, X: x, Y: rowY(r), Short: cut(g[i].Label, lim.LabelRunes),
			})
		}
		n := len(shown)
		if len(hidden) > 0 {
			for _, i := range hidden {
				row[i] = float64(n)
			}
			out.Summaries = append(out.Summaries, summaryOf(g, hidden, l, x, rowY(n)))
			n++
		}
		rows = max(rows, n)
	}
	if depth > drawLayers {
		var rest []int
		for l := drawLayers; l < depth; l++ {
			rest = append(rest, byLayer[l]...)
		}
		x := float64(Margin + drawLayers*(NodeWidth+ColumnGap))
		out.Summaries = append(out.Summaries, summaryOf(g, rest, -1, x, rowY(0)))
		rows = max(rows, 1)
	}
	out.Drawn = len(out.Boxes)

	// Lines between drawn jobs, in the order of edges.
	pos := make(map[int][2]float64, out.Drawn)
	for _, b := range out.Boxes {
		pos[index[b.ID]] = [2]float64{b.X, b.Y}
	}
	for _, e := range edges {
		p, okp := index[e.Parent]
		c, okc := index[e.Child]
		if !okp || !okc || p == c || !drawn[p] || !drawn[c] || len(out.Lines) >= lim.MaxEdges {
			out.HiddenEdges++
			continue
		}
		out.Lines = append(out.Lines, Line{Parent: e.Parent, Child: e.Child, D: curve(pos[p], pos[c])})
	}

	cols := drawLayers
	if depth > drawLayers {
		cols++
	}
	out.Width = float64(2*Margin + cols*NodeWidth + max(cols-1, 0)*ColumnGap)
	out.Height = float64(2*Margin + rows*NodeHeight + max(rows-1, 0)*RowGap)
	if len(g) == 0 {
		out.Width, out.Height = 2*Margin+NodeWidth, 2*Margin+NodeHeight
	}
	return out
}

func (l Limits) withDefaults() Limits {
	if l.MaxPerLayer <= 0 {
		l.MaxPerLayer = DefaultMaxPerLayer
	}
	if l.MaxLayers <= 0 {
		l.MaxLayers = DefaultMaxLayers
	}
	if l.MaxEdges <= 0 {
		l.MaxEdges = DefaultMaxEdges
	}
	if l.LabelRunes <= 0 {
		l.LabelRunes = DefaultLabelRunes
	}
	return l
}

func rank(status string) int {
	if r, ok := statusRank[status]; ok {
		return r
	}
	return len(statusRank)
}

func rowY(r int) float64 { return float64(Margin + r*(NodeHeight+RowGap)) }

// summaryOf counts ids by status, in the rank order.
func summaryOf(g []Node, ids []int, layer int, x, y float64) Summary {
	counts := map[string]int{}
	for _, i := range ids {
		counts[g[i].Status]++
	}
	s := Summary{Layer: layer, X: x, Y: y, Count: len(ids)}
	for st, n := range counts {
		s.ByStatus = append(s.ByStatus, StatusCount{Status: st, Count: n})
	}
	slices.SortFunc(s.ByStatus, func(a, b StatusCount) int {
		return cmp.Or(cmp.Compare(rank(a.Status), rank(b.Status)), cmp.Compare(a.Status, b.Status))
	})
	return s
}

// curve is a cubic from the middle of the parent box's right edge to the
// middle of the child box's left edge.
func curve(p, c [2]float64) string {
	x1, y1 := p[0]+NodeWidth, p[1]+NodeHeight/2
	x2, y2 := c[0], c[1]+NodeHeight/2
	mid := (x1 + x2) / 2
	return "M" + num(x1) + "," + num(y1) + " C" + num(mid) + "," + num(y1) + " " + num(mid) + "," + num(y2) + " " + num(x2) + "," + num(y2)
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// cut shortens s to n characters, an ellipsis marking the cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
