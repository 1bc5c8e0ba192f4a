package workflowgraph

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func nodes(spec ...string) []Node {
	out := make([]Node, len(spec))
	for i, s := range spec {
		id, status, _ := strings.Cut(s, ":")
		if status == "" {
			status = "COMPLETED"
		}
		out[i] = Node{ID: id, Label: "topic." + id, Status: status}
	}
	return out
}

func boxOf(t *testing.T, l Layout, id string) Box {
	t.Helper()
	for _, b := range l.Boxes {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("no box for %s in %+v", id, l.Boxes)
	return Box{}
}

func TestDiamondIsLayeredByDepth(t *testing.T) {
	l := Lay(nodes("a", "b", "c:DEAD_LETTERED", "d:CANCELED"),
		[]Edge{{"a", "b"}, {"a", "c"}, {"b", "d"}, {"c", "d"}}, Limits{})
	require.Equal(t, 3, l.Layers)
	require.Equal(t, 4, l.Drawn)
	require.Zero(t, l.HiddenEdges)
	require.Empty(t, l.Summaries)
	a, b, c, d := boxOf(t, l, "a"), boxOf(t, l, "b"), boxOf(t, l, "c"), boxOf(t, l, "d")
	require.Equal(t, []int{0, 1, 1, 2}, []int{a.Layer, b.Layer, c.Layer, d.Layer})
	// Layers run left to right, a layer's jobs top to bottom.
	require.Less(t, a.X, b.X)
	require.Equal(t, b.X, c.X)
	require.Less(t, b.X, d.X)
	require.NotEqual(t, b.Y, c.Y)
	require.Equal(t, "DEAD_LETTERED", c.Status)
	require.Len(t, l.Lines, 4)
	// Each line starts at its parent's right edge and ends at its child's
	// left edge.
	for _, ln := range l.Lines {
		p, ch := boxOf(t, l, ln.Parent), boxOf(t, l, ln.Child)
		require.True(t, strings.HasPrefix(ln.D, fmt.Sprintf("M%s,%s ", num(p.X+NodeWidth), num(p.Y+NodeHeight/2))), ln.D)
		require.True(t, strings.HasSuffix(ln.D, fmt.Sprintf(" %s,%s", num(ch.X), num(ch.Y+NodeHeight/2))), ln.D)
	}
	// Every box fits the viewBox.
	for _, bx := range l.Boxes {
		require.LessOrEqual(t, bx.X+NodeWidth, l.Width)
		require.LessOrEqual(t, bx.Y+NodeHeight, l.Height)
	}
}

func TestLayerIsTheLongestPath(t *testing.T) {
	// a -> b -> c, and a -> c: c is two deep, not one.
	l := Lay(nodes("a", "b", "c"), []Edge{{"a", "b"}, {"b", "c"}, {"a", "c"}}, Limits{})
	require.Equal(t, 2, boxOf(t, l, "c").Layer)
	require.Equal(t, 3, l.Layers)
}

func TestChildrenFollowTheirParentsRows(t *testing.T) {
	// Two chains given crosswise: the second layer is ordered by the first.
	l := Lay(nodes("p1", "p2", "c2", "c1"), []Edge{{"p1", "c1"}, {"p2", "c2"}}, Limits{})
	require.Less(t, boxOf(t, l, "p1").Y, boxOf(t, l, "p2").Y)
	require.Less(t, boxOf(t, l, "c1").Y, boxOf(t, l, "c2").Y)
}

func TestAWideLayerIsCappedAndSummarisedKeepingFailures(t *testing.T) {
	// A fan-out of 1,000 and a fan-in: one failure among the children is
	// drawn whatever its place.
	g := []Node{{ID: "root", Status: "COMPLETED"}}
	var edges []Edge
	for i := range 1000 {
		st := "COMPLETED"
		switch {
		case i == 999:
			st = "DEAD_LETTERED"
		case i%10 == 0:
			st = "RUNNING"
		}
		id := fmt.Sprintf("c%04d", i)
		g = append(g, Node{ID: id, Status: st})
		edges = append(edges, Edge{"root", id}, Edge{id, "sink"})
	}
	g = append(g, Node{ID: "sink", Status: "PENDING"})
	l := Lay(g, edges, Limits{MaxPerLayer: 20})
	require.Equal(t, 3, l.Layers)
	require.Equal(t, 1002, l.Jobs)
	require.Equal(t, 1+20+1, l.Drawn)
	require.Equal(t, "DEAD_LETTERED", boxOf(t, l, "c0999").Status)
	require.Len(t, l.Summaries, 1)
	s := l.Summaries[0]
	require.Equal(t, 1, s.Layer)
	require.Equal(t, 980, s.Count)
	// 100 running, 1 of them drawn... ranked: the dead letter, then 19
	// running; the summary holds the other 81 running and 899 completed.
	require.Equal(t, []StatusCount{{"RUNNING", 81}, {"COMPLETED", 899}}, s.ByStatus)
	require.Len(t, l.Lines, 20+20)
	require.Equal(t, 2000-40, l.HiddenEdges)
	// The summary sits below the layer's last box, inside the viewBox.
	require.Equal(t, rowY(20), s.Y)
	require.LessOrEqual(t, s.Y+NodeHeight, l.Height)
}

func TestDeepGraphsAreCappedInLayers(t *testing.T) {
	var g []Node
	var edges []Edge
	for i := range 100 {
		g = append(g, Node{ID: strconv.Itoa(i), Status: "PENDING"})
		if i > 0 {
			edges = append(edges, Edge{strconv.Itoa(i - 1), strconv.Itoa(i)})
		}
	}
	l := Lay(g, edges, Limits{MaxLayers: 10})
	require.Equal(t, 100, l.Layers)
	require.Equal(t, 10, l.Drawn)
	require.Len(t, l.Summaries, 1)
	require.Equal(t, -1, l.Summaries[0].Layer)
	require.Equal(t, 90, l.Summaries[0].Count)
	require.Equal(t, float64(2*Margin+11*NodeWidth+10*ColumnGap), l.Width)
}

func TestEdgesAreCapped(t *testing.T) {
	g := nodes("a", "b", "c", "d")
	l := Lay(g, []Edge{{"a", "b"}, {"a", "c"}, {"a", "d"}}, Limits{MaxEdges: 2})
	require.Len(t, l.Lines, 2)
	require.Equal(t, 1, l.HiddenEdges)
}

func TestBrokenInputIsPlacedNotLost(t *testing.T) {
	// A cycle (the schema never stores one), an edge to a job not in the
	// graph, a self edge and a duplicate id.
	g := nodes("a", "b", "c", "a")
	l := Lay(g, []Edge{{"b", "c"}, {"c", "b"}, {"a", "ghost"}, {"a", "a"}}, Limits{})
	require.Equal(t, 3, l.Jobs)
	require.Equal(t, 3, l.Drawn)
	require.Equal(t, 2, l.Unplaced)
	require.Equal(t, 2, l.Layers)
	require.Equal(t, 1, boxOf(t, l, "b").Layer)
	require.Equal(t, 2, l.HiddenEdges)
	require.Len(t, l.Lines, 2)
}

func TestEmptyGraph(t *testing.T) {
	l := Lay(nil, nil, Limits{})
	require.Zero(t, l.Drawn)
	require.Positive(t, l.Width)
	require.Positive(t, l.Height)
}

func TestLabelsAreCutOnCharacters(t *testing.T) {
	l := Lay([]Node{{ID: "x", Label: strings.Repeat("é", 40), Status: "PENDING"}}, nil, Limits{LabelRunes: 10})
	require.Equal(t, strings.Repeat("é", 9)+"…", l.Boxes[0].Short)
	require.Equal(t, strings.Repeat("é", 40), l.Boxes[0].Label)
}
